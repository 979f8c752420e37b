#pragma once
// The clocks a run's figures are read from: the steady clock (wall time,
// shared by every process on a host) and CPU time of the calling thread or
// of the whole process (threads descheduled on shared cores get none).
#include <chrono>
#include <ctime>

namespace pd {

inline double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

inline double cpu_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

inline double thread_cpu_seconds() { return cpu_seconds(CLOCK_THREAD_CPUTIME_ID); }
inline double process_cpu_seconds() { return cpu_seconds(CLOCK_PROCESS_CPUTIME_ID); }

}  // namespace pd
