#include "core/cpu/gelu_kernels.h"

#include "core/cpu/fast_math.h"

namespace pd::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
}  // namespace

void gelu_forward(const float* x, float* y, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float t = tanh_approx(kSqrt2OverPi * (v + kCubic * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    float v = x[i];
    float t = tanh_approx(kSqrt2OverPi * (v + kCubic * v * v * v));
    float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
    dx[i] = dy[i] * (0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du);
  }
}

}  // namespace pd::cpu
