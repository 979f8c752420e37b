#include "core/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/cpu/fast_math.h"
#include "core/cpu/gemm.h"
#include "core/cpu/parallel_grain.h"

namespace pd::cpu {

// The per-(batch, head) products are GEMMs with a stride of 3D into qkv,
// run one after another so that OpenBLAS threads each of them (calling
// OpenBLAS from inside OpenMP threads oversubscribes its pthread pool).
// The row-wise softmax work in between is one parallel loop over all rows.

void causal_softmax_rows(float* scores, int64_t T) {
  for (int64_t t = 0; t < T; ++t) {
    float* row = scores + t * T;
    float mx = max8(row, t + 1);
    for (int64_t j = 0; j <= t; ++j) row[j] -= mx;
    map8(row, row, t + 1, exp8);
    float sum = sum8(row, t + 1);
    float inv = 1.0f / sum;
    for (int64_t j = 0; j <= t; ++j) row[j] *= inv;
    std::fill(row + t + 1, row + T, 0.0f);
  }
}

namespace {

struct HeadView {
  const float* q;
  const float* k;
  const float* v;
};

HeadView head_of(const AttentionShape& s, const float* qkv, int64_t bh) {
  int64_t b = bh / s.heads, h = bh % s.heads, D = s.dim();
  const float* q = qkv + b * s.seq * 3 * D + h * s.head_dim;
  return {q, q + D, q + 2 * D};
}

int64_t head_offset(const AttentionShape& s, int64_t bh, int64_t row_width) {
  return (bh / s.heads) * s.seq * row_width + (bh % s.heads) * s.head_dim;
}

}  // namespace

void attention_forward(const AttentionShape& s, const float* qkv, float* probs, float* out) {
  const int64_t T = s.seq, hd = s.head_dim, D = s.dim(), BH = s.batch * s.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (int64_t bh = 0; bh < BH; ++bh) {
    HeadView hv = head_of(s, qkv, bh);
    gemm(false, true, T, T, hd, scale, hv.q, 3 * D, hv.k, 3 * D, 0.0f, probs + bh * T * T, T);
  }
#pragma omp parallel for schedule(static) if(worth_parallel(BH * T * T))
  for (int64_t bh = 0; bh < BH; ++bh) causal_softmax_rows(probs + bh * T * T, T);
  for (int64_t bh = 0; bh < BH; ++bh) {
    HeadView hv = head_of(s, qkv, bh);
    gemm(false, false, T, hd, T, 1.0f, probs + bh * T * T, T, hv.v, 3 * D, 0.0f,
         out + head_offset(s, bh, D), D);
  }
}

void attention_backward(const AttentionShape& s, const float* qkv, const float* probs,
                        const float* dout, float* dqkv) {
  const int64_t T = s.seq, hd = s.head_dim, D = s.dim(), BH = s.batch * s.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // Every element is written by the dP GEMM before it is read.
  auto dS_buffer = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(BH * T * T));
  float* dS = dS_buffer.get();
  for (int64_t bh = 0; bh < BH; ++bh) {
    HeadView hv = head_of(s, qkv, bh);
    const float* dO = dout + head_offset(s, bh, D);
    const float* P = probs + bh * T * T;
    float* dq = dqkv + head_offset(s, bh, 3 * D);
    gemm(false, true, T, T, hd, 1.0f, dO, D, hv.v, 3 * D, 0.0f, dS + bh * T * T, T);  // dP
    gemm(true, false, T, hd, T, 1.0f, P, T, dO, D, 0.0f, dq + 2 * D, 3 * D);                // dV
  }
  // Softmax backward in place: dS = P * (dP - sum_j P dP) * scale.
#pragma omp parallel for schedule(static) if(worth_parallel(BH * T * T))
  for (int64_t bh = 0; bh < BH; ++bh) {
    for (int64_t t = 0; t < T; ++t) {
      const float* pr = probs + (bh * T + t) * T;
      float* gr = dS + (bh * T + t) * T;
      float dot = dot8(pr, gr, t + 1);
      for (int64_t j = 0; j <= t; ++j) gr[j] = pr[j] * (gr[j] - dot) * scale;
      std::fill(gr + t + 1, gr + T, 0.0f);
    }
  }
  for (int64_t bh = 0; bh < BH; ++bh) {
    HeadView hv = head_of(s, qkv, bh);
    const float* g = dS + bh * T * T;
    float* dq = dqkv + head_offset(s, bh, 3 * D);
    gemm(false, false, T, hd, T, 1.0f, g, T, hv.k, 3 * D, 0.0f, dq, 3 * D);     // dQ
    gemm(true, false, T, hd, T, 1.0f, g, T, hv.q, 3 * D, 0.0f, dq + D, 3 * D);  // dK
  }
}

}  // namespace pd::cpu
