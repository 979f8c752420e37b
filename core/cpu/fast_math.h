#pragma once
// Branch-free float exp and tanh that GCC vectorises (std::exp does not
// without -ffast-math). Plain IEEE operations only, so a result depends
// on the input alone: the same on every thread and every run.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

namespace pd::cpu {

// exp(x) with ~2 ulp error (Cephes expf polynomial); saturates instead of
// overflowing: inputs are clamped to [-87, 88].
inline float exp_approx(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  float n = std::floor(x * 1.44269504088896341f + 0.5f);
  float r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r * r + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return y * scale;
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): exact limits at +-inf through saturation.
inline float tanh_approx(float u) { return 1.0f - 2.0f / (exp_approx(2.0f * u) + 1.0f); }

}  // namespace pd::cpu
