#pragma once
// A data file the user named (--data npy:, tokens:, images:), opened
// without trusting it: a folder, a FIFO, a socket or a device is refused
// before a byte is read (a FIFO would block the open itself, so the file
// is opened non-blocking and checked with fstat on the open descriptor),
// and reads are by byte range, so a reader allocates only what the file's
// own header says it needs. Every refusal is a UserError naming the file.
// Internal to models/.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <utility>

#include "core/error.h"
#include "core/text.h"

namespace pd::data {

class DataFile {
 public:
  // `reader` prefixes messages ("--data npy").
  DataFile(std::string path, std::string reader) : path_(std::move(path)), reader_(std::move(reader)) {
    struct stat st{};
    if (::stat(path_.c_str(), &st) == 0) refuse_unless_regular(st);  // a socket cannot even be opened
    fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd_ < 0) throw error(errno == ENOENT ? std::string("not found") : cat("cannot be opened: ", std::strerror(errno)));
    if (::fstat(fd_, &st) != 0) {
      const int e = errno;
      ::close(fd_);
      throw error(cat("cannot be opened: ", std::strerror(e)));
    }
    if (!S_ISREG(st.st_mode)) {  // replaced since the stat
      ::close(fd_);
      refuse_unless_regular(st);
    }
    size_ = static_cast<uint64_t>(st.st_size);
  }
  DataFile(DataFile&& o) noexcept
      : path_(std::move(o.path_)), reader_(std::move(o.reader_)), fd_(std::exchange(o.fd_, -1)), size_(o.size_) {}
  DataFile(const DataFile&) = delete;
  DataFile& operator=(const DataFile&) = delete;
  ~DataFile() {
    if (fd_ >= 0) ::close(fd_);
  }

  const std::string& path() const { return path_; }
  uint64_t size() const { return size_; }

  // Exactly n bytes at `offset`, or a UserError saying the file ends early.
  void read_into(uint64_t offset, void* dst, uint64_t n) const {
    auto* out = static_cast<char*>(dst);
    for (uint64_t done = 0; done < n;) {
      const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
      const ssize_t got = ::pread(fd_, out + done, chunk, static_cast<off_t>(offset + done));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) throw error(cat("cannot be read: ", std::strerror(errno)));
      if (got == 0) throw error(cat("ends at byte ", offset + done, " where ", offset + n, " are needed (truncated?)"));
      done += static_cast<uint64_t>(got);
    }
  }
  std::string read(uint64_t offset, uint64_t n) const {
    std::string out = allocate<std::string>(n, "bytes");
    read_into(offset, out.data(), n);
    return out;
  }

  // A container of n elements, or a UserError naming the file when the
  // memory is not there (a valid header may describe more data than fits).
  template <class Container>
  Container allocate(uint64_t n, const char* what) const {
    try {
      return Container(static_cast<size_t>(n), typename Container::value_type{});
    } catch (const std::bad_alloc&) {
      throw error(cat("needs ", n, " ", what, " in memory, which could not be allocated"));
    } catch (const std::length_error&) {
      throw error(cat("needs ", n, " ", what, " in memory, which could not be allocated"));
    }
  }

  void refuse_unless_regular(const struct stat& st) const {
    if (S_ISDIR(st.st_mode)) throw error("is a folder; name a file");
    if (!S_ISREG(st.st_mode)) throw error("is not a regular file (a device, FIFO or socket); name a file");
  }
  UserError error(const std::string& why) const { return UserError(cat(reader_, ": ", path_, " ", why)); }

 private:
  std::string path_, reader_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

}  // namespace pd::data
