#include "core/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/fast_math.h"
#include "core/cpu/gemm.h"

namespace pd::cpu {

void causal_softmax_rows(float* scores, int64_t T) {
  for (int64_t t = 0; t < T; ++t) {
    float* row = scores + t * T;
    float mx = row[0];
    for (int64_t j = 1; j <= t; ++j) mx = std::max(mx, row[j]);
    for (int64_t j = 0; j <= t; ++j) row[j] -= mx;
    map8(row, row, t + 1, exp8);
    float sum = 0.0f;
    for (int64_t j = 0; j <= t; ++j) sum += row[j];
    float inv = 1.0f / sum;
    for (int64_t j = 0; j <= t; ++j) row[j] *= inv;
    std::fill(row + t + 1, row + T, 0.0f);
  }
}

// Each (batch, head) pair is independent: threads take whole pairs and
// run single-threaded GEMMs on them, so no sum is split across threads.
void attention_forward(const AttentionShape& s, const float* qkv, float* probs, float* out) {
  const int64_t T = s.seq, H = s.heads, hd = s.head_dim, D = s.dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel for schedule(static)
  for (int64_t bh = 0; bh < s.batch * H; ++bh) {
    int64_t b = bh / H, h = bh % H;
    const float* q = qkv + b * T * 3 * D + h * hd;
    const float* k = q + D;
    const float* v = q + 2 * D;
    float* P = probs + bh * T * T;
    gemm(false, true, T, T, hd, scale, q, 3 * D, k, 3 * D, 0.0f, P, T);
    causal_softmax_rows(P, T);
    gemm(false, false, T, hd, T, 1.0f, P, T, v, 3 * D, 0.0f, out + b * T * D + h * hd, D);
  }
}

void attention_backward(const AttentionShape& s, const float* qkv, const float* probs,
                        const float* dout, float* dqkv) {
  const int64_t T = s.seq, H = s.heads, hd = s.head_dim, D = s.dim();
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
#pragma omp parallel
  {
    std::vector<float> dP(static_cast<size_t>(T * T));
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < s.batch * H; ++bh) {
      int64_t b = bh / H, h = bh % H;
      const float* q = qkv + b * T * 3 * D + h * hd;
      const float* k = q + D;
      const float* v = q + 2 * D;
      float* dq = dqkv + b * T * 3 * D + h * hd;
      float* dk = dq + D;
      float* dv = dq + 2 * D;
      const float* P = probs + bh * T * T;
      const float* dO = dout + b * T * D + h * hd;
      gemm(false, true, T, T, hd, 1.0f, dO, D, v, 3 * D, 0.0f, dP.data(), T);
      gemm(true, false, T, hd, T, 1.0f, P, T, dO, D, 0.0f, dv, 3 * D);
      // Softmax backward in place: dS = P * (dP - sum_j P dP) * scale.
      for (int64_t t = 0; t < T; ++t) {
        const float* pr = P + t * T;
        float* gr = dP.data() + t * T;
        float dot = 0.0f;
        for (int64_t j = 0; j <= t; ++j) dot += pr[j] * gr[j];
        for (int64_t j = 0; j <= t; ++j) gr[j] = pr[j] * (gr[j] - dot) * scale;
        std::fill(gr + t + 1, gr + T, 0.0f);
      }
      gemm(false, false, T, hd, T, 1.0f, dP.data(), T, k, 3 * D, 0.0f, dq, 3 * D);
      gemm(true, false, T, hd, T, 1.0f, dP.data(), T, q, 3 * D, 0.0f, dk, 3 * D);
    }
  }
}

}  // namespace pd::cpu
