#pragma once
// Reading an input file that the user named, and parsing JSON from it,
// without trusting it: every reader of a pipedream file (model spec,
// profile, plan, topology, schedule, checkpoint state, safetensors header,
// ONNX model) goes through these, so that
//  - a folder, a device (/dev/zero, /dev/urandom), a FIFO or a socket is
//    refused before a byte is read, and a file larger than the reader's
//    limit is refused instead of read until memory runs out;
//  - JSON nested deeper than kMaxJsonDepth is refused by a scan of the
//    bracket depth before the parser (and the recursive destructor of the
//    parsed value) can run out of stack.
// Each refusal is a UserError naming the file and, for nesting, the field.
// Header-only (like error.h): the planner reads plans without linking the
// compute core.
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text.h"

namespace pd {

// No pipedream file nests more than a few levels (a model spec's
// layers[].kernel is 3); 64 leaves room and is far below where nlohmann's
// recursion needs more stack than a thread has (tens of thousands).
constexpr int kMaxJsonDepth = 64;

// Text inputs (JSON, graph.txt, schedule CSV): the largest real ones (a
// profile of thousands of layers) are a few MB.
constexpr uint64_t kMaxTextInputBytes = uint64_t{256} << 20;

// A regular file of at most max_bytes, or a UserError saying what else it is.
// Returns its size. `what` names the input for messages ("the plan").
inline uint64_t checked_input_file(const std::string& path, std::string_view what, uint64_t max_bytes) {
  struct stat st{};
  if (::stat(path.c_str(), &st) != 0)
    throw UserError(cat(path, ": cannot open ", what, ": ", std::strerror(errno)));
  if (S_ISDIR(st.st_mode)) throw UserError(cat(path, ": ", what, " is a folder; name a file"));
  if (!S_ISREG(st.st_mode))
    throw UserError(cat(path, ": ", what, " is not a regular file (a device, FIFO or socket); name a file"));
  const auto size = static_cast<uint64_t>(st.st_size);
  if (size > max_bytes)
    throw UserError(cat(path, ": ", what, " is ", bytes_text(double(size)), "; at most ",
                        bytes_text(double(max_bytes)), " is accepted"));
  return size;
}

// The whole file, checked by checked_input_file; a file that grows while
// being read is cut at max_bytes + 1 and refused.
inline std::string read_input_file(const std::string& path, std::string_view what,
                                   uint64_t max_bytes = kMaxTextInputBytes) {
  const uint64_t size = checked_input_file(path, what, max_bytes);
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw UserError(cat(path, ": cannot open ", what, ": ", std::strerror(errno)));
  std::string text;
  text.resize(static_cast<size_t>(size));
  size_t got = text.empty() ? 0 : std::fread(text.data(), 1, text.size(), f);
  char extra[4096];
  while (got == text.size() && text.size() <= max_bytes) {
    const size_t n = std::fread(extra, 1, sizeof extra, f);
    if (n == 0) break;
    text.append(extra, n);
    got = text.size();
  }
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) throw UserError(cat(path, ": cannot read ", what, ": ", std::strerror(errno)));
  if (text.size() > max_bytes)
    throw UserError(cat(path, ": ", what, " grew beyond ", bytes_text(double(max_bytes)), " while being read"));
  text.resize(got);
  return text;
}

namespace json_depth_detail {

struct Level {
  bool array;
  size_t index;           // arrays: the element being read
  std::string_view key;   // objects: the member being read
};

// "layers[0].kernel[0][0]...": where the too-deep value sits, its first
// levels spelled out.
inline std::string path_text(const std::vector<Level>& levels) {
  constexpr size_t kShown = 6;
  std::string out;
  for (size_t i = 0; i < levels.size() && i < kShown; ++i) {
    if (levels[i].array) out += cat("[", levels[i].index, "]");
    else out += cat(out.empty() ? "" : ".", std::string(levels[i].key.substr(0, 40)));
  }
  if (levels.size() > kShown) out += "...";
  return out;
}

}  // namespace json_depth_detail

// Refuses JSON text whose arrays and objects nest deeper than max_depth,
// naming the field and the line. Only brackets outside strings count; the
// scan does not validate anything else (the parser does that afterwards).
inline void check_json_depth(std::string_view text, const std::string& source, int max_depth = kMaxJsonDepth) {
  using json_depth_detail::Level;
  std::vector<Level> levels;
  bool expect_key = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') {
      size_t j = i + 1;
      while (j < text.size() && text[j] != '"') j += text[j] == '\\' ? 2 : 1;
      if (expect_key && !levels.empty() && !levels.back().array)
        levels.back().key = text.substr(i + 1, std::min(j, text.size()) - i - 1);
      expect_key = false;
      i = j;
    } else if (c == '[' || c == '{') {
      if (static_cast<int>(levels.size()) >= max_depth) {
        size_t line = 1;
        for (size_t k = 0; k < i; ++k) line += text[k] == '\n';
        const std::string field = json_depth_detail::path_text(levels);
        throw UserError(cat(source, ":", line, ": ", field.empty() ? "the document" : "field '" + field + "'",
                            " nests arrays/objects deeper than ", max_depth,
                            " levels (no pipedream file nests more than a few)"));
      }
      levels.push_back({c == '[', 0, {}});
      expect_key = c == '{';
    } else if (c == ']' || c == '}') {
      if (!levels.empty()) levels.pop_back();
      expect_key = false;
    } else if (c == ',' && !levels.empty()) {
      if (levels.back().array) ++levels.back().index;
      else expect_key = true;
    }
  }
}

// JSON text parsed after check_json_depth; a syntax error or a number out
// of range (1e999) is a UserError "<source>: invalid JSON: ...".
inline nlohmann::json parse_json_input(std::string_view text, const std::string& source) {
  check_json_depth(text, source);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw UserError(cat(source, ": invalid JSON: ", e.what()));
  }
}

// read_input_file + parse_json_input.
inline nlohmann::json read_json_file(const std::string& path, std::string_view what,
                                     uint64_t max_bytes = kMaxTextInputBytes) {
  return parse_json_input(read_input_file(path, what, max_bytes), path);
}

}  // namespace pd
