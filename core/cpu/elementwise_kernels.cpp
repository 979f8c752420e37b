#include "core/cpu/elementwise_kernels.h"

#include "core/cpu/parallel.h"

namespace pd::cpu {

void relu_forward(int64_t n, const float* x, float* y) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] <= 0.0f ? 0.0f : x[i];  // NaN passes through, as in PyTorch; -0 -> +0
}

void relu_backward(int64_t n, const float* y, const float* dy, float* dx) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

void add_relu_forward(int64_t n, const float* a, const float* b, float* y) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) {
    const float s = a[i] + b[i];
    y[i] = s > 0.0f ? s : 0.0f;
  }
}

void add_into(int64_t n, float* a, const float* b) {
#pragma omp parallel for schedule(static) if (n >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i) a[i] += b[i];
}

}  // namespace pd::cpu
