#pragma once
// The compute core's switches read from the environment (PIPEDREAM_HOST_CACHE,
// PIPEDREAM_HUGE_PAGES, PIPEDREAM_DIRECT_CONV): on unless set to "0".
#include <cstdlib>
#include <cstring>

namespace pd::cpu {

inline bool environment_switch_on(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr || std::strcmp(v, "0") != 0;
}

}  // namespace pd::cpu
