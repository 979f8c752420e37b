#pragma once
// Error types shared by every part of pipedream. Header-only so that the
// planner and the schedules can use them without linking the compute core.
//
//   UserError     - the input is wrong (a flag, a file, a spec): exit code 2.
//   RuntimeFailure - something failed while running (a peer died, I/O): exit 1.
#include <sstream>
#include <stdexcept>
#include <string>

namespace pd {

struct UserError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct RuntimeFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// The user stopped the work (Ctrl-C, SIGTERM): exit code 130, as a shell's.
struct Interrupted : std::runtime_error {
  using std::runtime_error::runtime_error;
};

namespace detail {
inline void append_all(std::ostringstream&) {}
template <class T, class... R>
void append_all(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  append_all(os, rest...);
}
}  // namespace detail

// Builds a message from pieces: cat("layer ", i, ": bad kernel ", k).
template <class... A>
std::string cat(const A&... parts) {
  std::ostringstream os;
  detail::append_all(os, parts...);
  return os.str();
}

// Internal invariant; a failure here is a bug in pipedream, not user input.
#define PD_CHECK(cond, ...)                                                     \
  do {                                                                          \
    if (!(cond))                                                                \
      throw std::logic_error(::pd::cat(__FILE__, ":", __LINE__, ": check `",    \
                                       #cond, "` failed: ", ##__VA_ARGS__));    \
  } while (0)

}  // namespace pd
