#include "core/cpu/layernorm_kernels.h"

#include <algorithm>
#include <cmath>

namespace pd::cpu {

void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                       float* rstd, int64_t rows, int64_t D, float eps) {
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float s = 0.0f;
    for (int64_t c = 0; c < D; ++c) s += xr[c];
    float m = s / static_cast<float>(D);
    // Two passes: the variance of centred values does not cancel.
    float v = 0.0f;
    for (int64_t c = 0; c < D; ++c) v += (xr[c] - m) * (xr[c] - m);
    float rs = 1.0f / std::sqrt(v / static_cast<float>(D) + eps);
    mean[r] = m;
    rstd[r] = rs;
    float* yr = y + r * D;
    for (int64_t c = 0; c < D; ++c) yr[c] = (xr[c] - m) * rs * w[c] + b[c];
  }
}

void layernorm_backward(const float* x, const float* w, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dw, float* db, int64_t rows, int64_t D) {
  // Parameter gradients: threads split the columns (no cross-thread sums).
  constexpr int64_t kChunk = 64;
  int64_t chunks = (D + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t ch = 0; ch < chunks; ++ch) {
    int64_t c0 = ch * kChunk, c1 = std::min(D, c0 + kChunk);
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * D;
      const float* gr = dy + r * D;
      float m = mean[r], rs = rstd[r];
      for (int64_t c = c0; c < c1; ++c) {
        dw[c] += gr[c] * (xr[c] - m) * rs;
        db[c] += gr[c];
      }
    }
  }
  if (!dx) return;
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    const float* gr = dy + r * D;
    float m = mean[r], rs = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
    for (int64_t c = 0; c < D; ++c) {
      float g = gr[c] * w[c];
      sg += g;
      sgx += g * (xr[c] - m) * rs;
    }
    float mg = sg / static_cast<float>(D), mgx = sgx / static_cast<float>(D);
    float* dr = dx + r * D;
    for (int64_t c = 0; c < D; ++c) dr[c] = rs * (gr[c] * w[c] - mg - (xr[c] - m) * rs * mgx);
  }
}

}  // namespace pd::cpu
