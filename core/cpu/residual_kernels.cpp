#include "core/cpu/residual_kernels.h"

namespace pd::cpu {

void residual_add(const float* a, const float* b, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

}  // namespace pd::cpu
