#pragma once
// Human-readable quantities for messages and tables. Header-only: the
// planner and the simulator print sizes too and do not link the compute core.
#include <cstdio>
#include <string>

namespace pd {

// 1536 -> "1.54 KB": decimal units (KB = 10^3 bytes), the units the planner
// reads sizes in (--memory 16GB is 16 * 10^9 bytes).
inline std::string bytes_text(double bytes) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (bytes >= 1000 && u < 4) bytes /= 1000, ++u;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %s", bytes, units[u]);
  return buf;
}

// 0.0123 -> "12.300 ms": seconds, in s, ms or us, whichever reads best.
inline std::string seconds_text(double s) {
  char buf[64];
  if (s >= 1) std::snprintf(buf, sizeof buf, "%.3f s", s);
  else if (s >= 1e-3) std::snprintf(buf, sizeof buf, "%.3f ms", s * 1e3);
  else std::snprintf(buf, sizeof buf, "%.3f us", s * 1e6);
  return buf;
}

// (1, "node", "nodes") -> "1 node"; (3, ...) -> "3 nodes".
inline std::string counted(long long n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

}  // namespace pd
