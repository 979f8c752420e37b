#pragma once
// Writing an output file atomically: the bytes go to a temporary file in
// the target's own folder (so that rename stays on one file system), which
// is renamed over the target only once complete. On any failure the
// temporary file is removed, so a reader sees the old file or the new one
// and nothing is left behind. Header-only (like error.h): the profile and
// plan writers use it without linking the compute core.
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>

#include "core/error.h"

namespace pd {

// The umask, read once (reading it means setting it, so not on every write).
inline mode_t process_umask() {
  static const mode_t mask = [] {
    const mode_t m = ::umask(0);
    ::umask(m);
    return m;
  }();
  return mask;
}

// `write` fills the open file and returns false on a write error. A target
// that is a folder, or in a folder that does not exist, is a UserError (the
// user named it); an I/O failure while writing is a RuntimeFailure.
inline void write_file_atomically(const std::string& path, const std::function<bool(std::FILE*)>& write) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::is_directory(path, ec)) throw UserError(cat("cannot write ", path, ": it is a folder; name a file"));
  const fs::path folder = fs::path(path).parent_path();
  if (!folder.empty() && !fs::is_directory(folder, ec))
    throw UserError(cat("cannot write ", path, ": folder ", folder.string(), " does not exist"));
  std::string tmp = path + ".tmp.XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) throw UserError(cat("cannot write ", path, ": ", std::strerror(errno)));
  ::fchmod(fd, 0666 & ~process_umask());  // mkstemp creates 0600: outputs get the usual mode
  std::FILE* f = ::fdopen(fd, "wb");
  if (!f) {
    ::close(fd);
    std::remove(tmp.c_str());
    throw RuntimeFailure(cat("cannot write ", path, ": ", std::strerror(errno)));
  }
  bool ok = write(f);
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  ok = std::fclose(f) == 0 && ok;
  int err = errno;
  if (ok) {
    ok = std::rename(tmp.c_str(), path.c_str()) == 0;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    throw RuntimeFailure(cat("writing ", path, " failed: ", std::strerror(err)));
  }
}

inline void write_file_atomically(const std::string& path, const std::string& bytes) {
  write_file_atomically(path, [&](std::FILE* f) {
    return bytes.empty() || std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  });
}

}  // namespace pd
