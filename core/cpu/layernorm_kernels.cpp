#include "core/cpu/layernorm_kernels.h"

#include <algorithm>
#include <cmath>

#include "core/cpu/fast_math.h"
#include "core/cpu/parallel_grain.h"

namespace pd::cpu {

void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                       float* rstd, int64_t rows, int64_t D, float eps) {
#pragma omp parallel for schedule(static) if(worth_parallel(rows * D))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    float m = sum8(xr, D) / static_cast<float>(D);
    // Two passes: the variance of centred values does not cancel.
    float v = sum_sq_dev8(xr, m, D);
    float rs = 1.0f / std::sqrt(v / static_cast<float>(D) + eps);
    mean[r] = m;
    rstd[r] = rs;
    float* yr = y + r * D;
    for (int64_t c = 0; c < D; ++c) yr[c] = (xr[c] - m) * rs * w[c] + b[c];
  }
}

void layernorm_backward(const float* x, const float* w, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dw, float* db, int64_t rows, int64_t D) {
  layernorm_backward_params(x, mean, rstd, dy, dw, db, rows, D);
  if (dx) layernorm_backward_input(x, w, mean, rstd, dy, dx, rows, D);
}

void layernorm_backward_params(const float* x, const float* mean, const float* rstd, const float* dy,
                               float* dw, float* db, int64_t rows, int64_t D) {
  // Threads split the columns (no cross-thread sums).
  constexpr int64_t kChunk = 64;
  int64_t chunks = (D + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if(worth_parallel(rows * D))
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
}

void layernorm_backward_input(const float* x, const float* w, const float* mean, const float* rstd,
                              const float* dy, float* dx, int64_t rows, int64_t D) {
  // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
#pragma omp parallel for schedule(static) if(worth_parallel(rows * D))
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * D;
    const float* gr = dy + r * D;
    float m = mean[r], rs = rstd[r];
    float* dr = dx + r * D;
    // dr holds g = dy * w until the last loop overwrites it.
    for (int64_t c = 0; c < D; ++c) dr[c] = gr[c] * w[c];
    float sg = sum8(dr, D);
    float sgx = dot_dev8(dr, xr, m, D) * rs;
    float mg = sg / static_cast<float>(D), mgx = sgx / static_cast<float>(D);
    for (int64_t c = 0; c < D; ++c) dr[c] = rs * (dr[c] - mg - (xr[c] - m) * rs * mgx);
  }
}

}  // namespace pd::cpu
