#pragma once
// Below this many elements of work a loop runs on the calling thread: an
// OpenMP fork/join costs microseconds on a quiet machine and a scheduler
// time slice on a busy one, more than such a loop takes. Which thread
// computes an output never changes its value, so this does not affect
// results.
#include <cstdint>

namespace pd::cpu {

constexpr int64_t kParallelGrain = 32768;
inline bool worth_parallel(int64_t elements) { return elements >= 2 * kParallelGrain; }

}  // namespace pd::cpu
