#pragma once
// When to split a CPU kernel's loop across threads. Below this many
// elements a parallel region (and waiting for a busy core) costs more than
// it saves. Splitting never changes results: each output is computed by
// one thread in a fixed order.
#include <omp.h>

#include <cstdint>

namespace pd::cpu {
constexpr int64_t kParallelMinElements = int64_t{1} << 15;

// Calls body(begin, end) on consecutive ranges covering [0, n): split
// statically over the threads when `work` elements are worth it and we are
// not inside a parallel region already, else once on the calling thread.
// Inside a region (a convolution's chunks run in parallel) even a nested
// one-thread region costs a team and futex calls at its barrier, hundreds
// per training step, so the serial case enters no OpenMP construct.
template <class Body>
void parallel_ranges(int64_t n, int64_t work, Body body) {
  if (n <= 0) return;
  if (work < kParallelMinElements || omp_in_parallel()) return body(int64_t{0}, n);
#pragma omp parallel
  {
    const int64_t parts = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t begin = n * t / parts, end = n * (t + 1) / parts;
    if (end > begin) body(begin, end);
  }
}

}  // namespace pd::cpu
