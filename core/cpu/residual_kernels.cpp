#include "core/cpu/residual_kernels.h"

#include "core/cpu/parallel_grain.h"

namespace pd::cpu {

void residual_add(const float* a, const float* b, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static) if(worth_parallel(n))
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

}  // namespace pd::cpu
