#include "core/cpu/gelu_kernels.h"

#include <algorithm>

#include "core/cpu/fast_math.h"
#include "core/cpu/parallel_grain.h"

namespace pd::cpu {

namespace {
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kCubic = 0.044715f;
// Threads take blocks of 4096 elements: a multiple of 8, so the 8-wide
// groups (and hence every element's arithmetic) do not depend on the split.
constexpr int64_t kBlock = 4096;
}  // namespace

void gelu_forward(const float* x, float* y, int64_t n) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if(worth_parallel(n))
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t i0 = b * kBlock, len = std::min(kBlock, n - i0);
    map8(x + i0, y + i0, len, [](f32x8 v) {
      f32x8 t = tanh8(kSqrt2OverPi * (v + kCubic * v * v * v));
      return 0.5f * v * (1.0f + t);
    });
  }
}

void gelu_backward(const float* x, const float* dy, float* dx, int64_t n) {
  int64_t blocks = (n + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if(worth_parallel(n))
  for (int64_t b = 0; b < blocks; ++b) {
    int64_t i0 = b * kBlock, len = std::min(kBlock, n - i0);
    // dx first holds gelu'(x), then is scaled by dy.
    map8(x + i0, dx + i0, len, [](f32x8 v) {
      f32x8 t = tanh8(kSqrt2OverPi * (v + kCubic * v * v * v));
      f32x8 du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * v * v);
      return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
    });
    for (int64_t i = i0; i < i0 + len; ++i) dx[i] *= dy[i];
  }
}

}  // namespace pd::cpu
