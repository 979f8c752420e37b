#include "core/cpu/attention_kernels.h"

#include <algorithm>
#include <cmath>
#include <memory>

#include "core/cpu/fast_math.h"
#include "core/cpu/gemm.h"
#include "core/cpu/parallel_grain.h"
#include "core/precision.h"

namespace pd::cpu {

// Two ways to run the per-(batch, head) products, GEMMs with a stride of
// 3D into qkv:
// - Row blocks (the usual case): each head's query rows are cut into blocks
//   of at most kBlockMnk multiply-adds per GEMM, and OpenMP threads take
//   whole blocks (gemm runs single-threaded inside a parallel region).
//   A block of rows r0..r1 needs key columns 0..r1 only, which skips most
//   of the masked upper triangle.
// - Whole heads one after another, each GEMM split over the threads by
//   gemm(), when a row block that small would be too thin to run efficiently.
// Either way every output element is computed by one GEMM call whose shape
// does not depend on the thread count.

namespace {

constexpr int64_t kBlockMnk = 4 * 65536;
constexpr int64_t kMinRowBlock = 16;

// Row t of a causal [T, T] matrix as bf16 GEMM operands (columns 0..t; the rest are 0).
void round_causal_row_if(bool bf16, float* row, int64_t t) {
  if (!bf16) return;
  for (int64_t j = 0; j <= t; ++j) row[j] = round_to_bf16(row[j]);
}

void causal_softmax_row(float* row, int64_t t, int64_t T) {
  float mx = max8(row, t + 1);
  for (int64_t j = 0; j <= t; ++j) row[j] -= mx;
  map8(row, row, t + 1, exp8);
  float inv = 1.0f / sum8(row, t + 1);
  for (int64_t j = 0; j <= t; ++j) row[j] *= inv;
  std::fill(row + t + 1, row + T, 0.0f);
}

// dS = P * (dP - sum_j P dP) * scale on row t, in place over dP.
void causal_softmax_backward_row(const float* p, float* g, int64_t t, int64_t T, float scale) {
  float dot = dot8(p, g, t + 1);
  for (int64_t j = 0; j <= t; ++j) g[j] = p[j] * (g[j] - dot) * scale;
  std::fill(g + t + 1, g + T, 0.0f);
}

struct Head {
  const float* q;
  const float* k;
  const float* v;
  float* P;         // [T, T] probabilities (forward writes, backward reads)
  int64_t out_off;  // offset of this head in [B, T, D] tensors
  int64_t qkv_off;  // offset of this head in [B, T, 3D] tensors
};

Head head_of(const AttentionShape& s, const float* qkv, const float* probs, int64_t bh) {
  const int64_t T = s.seq, D = s.dim(), b = bh / s.heads, h = bh % s.heads;
  int64_t qkv_off = b * T * 3 * D + h * s.head_dim;
  const float* q = qkv + qkv_off;
  return {q, q + D, q + 2 * D, const_cast<float*>(probs) + bh * T * T, b * T * D + h * s.head_dim, qkv_off};
}

// Rows per block so that every block GEMM has at most kBlockMnk multiply-adds;
// 0 when such blocks would be too thin (then whole heads run serially).
int64_t row_block(const AttentionShape& s) {
  int64_t rb = kBlockMnk / std::max<int64_t>(1, s.seq * s.head_dim);
  rb = std::min(rb, s.seq);
  if (rb >= s.seq) return s.seq;
  rb = rb / 8 * 8;
  return rb >= kMinRowBlock ? rb : 0;
}

}  // namespace

void causal_softmax_rows(float* scores, int64_t T) {
  for (int64_t t = 0; t < T; ++t) causal_softmax_row(scores + t * T, t, T);
}

void attention_forward(const AttentionShape& s, const float* qkv, float* probs, float* out) {
  const int64_t T = s.seq, hd = s.head_dim, D = s.dim(), BH = s.batch * s.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const int64_t rb = row_block(s);
  if (rb > 0) {
    const int64_t blocks = (T + rb - 1) / rb;
#pragma omp parallel for schedule(static) if(worth_parallel(BH * T * T))
    for (int64_t task = 0; task < BH * blocks; ++task) {
      Head h = head_of(s, qkv, probs, task / blocks);
      int64_t r0 = (task % blocks) * rb, r1 = std::min(T, r0 + rb);
      float* P = h.P + r0 * T;
      gemm(false, true, r1 - r0, r1, hd, scale, h.q + r0 * 3 * D, 3 * D, h.k, 3 * D, 0.0f, P, T);
      for (int64_t t = r0; t < r1; ++t) {
        causal_softmax_row(h.P + t * T, t, T);
        round_causal_row_if(s.bf16_operands, h.P + t * T, t);
      }
      gemm(false, false, r1 - r0, hd, r1, 1.0f, P, T, h.v, 3 * D, 0.0f, out + h.out_off + r0 * D, D);
    }
    return;
  }
  for (int64_t bh = 0; bh < BH; ++bh) {
    Head h = head_of(s, qkv, probs, bh);
    gemm(false, true, T, T, hd, scale, h.q, 3 * D, h.k, 3 * D, 0.0f, h.P, T);
  }
#pragma omp parallel for schedule(static) if(worth_parallel(BH * T * T))
  for (int64_t bh = 0; bh < BH; ++bh) {
    causal_softmax_rows(probs + bh * T * T, T);
    for (int64_t t = 0; t < T; ++t) round_causal_row_if(s.bf16_operands, probs + (bh * T + t) * T, t);
  }
  for (int64_t bh = 0; bh < BH; ++bh) {
    Head h = head_of(s, qkv, probs, bh);
    gemm(false, false, T, hd, T, 1.0f, h.P, T, h.v, 3 * D, 0.0f, out + h.out_off, D);
  }
}

void attention_backward(const AttentionShape& s, const float* qkv, const float* probs,
                        const float* dout, float* dqkv) {
  const int64_t T = s.seq, hd = s.head_dim, D = s.dim(), BH = s.batch * s.heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  // dS for every head; each element is written before it is read.
  auto dS_buffer = std::make_unique_for_overwrite<float[]>(static_cast<size_t>(BH * T * T));
  float* dS_all = dS_buffer.get();
  const int64_t rb = row_block(s);
  if (rb > 0) {
    const int64_t blocks = (T + rb - 1) / rb;
    // Query rows r0..r1: dP = dO V^T, then dS, then dQ = dS K.
#pragma omp parallel for schedule(static) if(worth_parallel(BH * T * T))
    for (int64_t task = 0; task < BH * blocks; ++task) {
      int64_t bh = task / blocks;
      Head h = head_of(s, qkv, probs, bh);
      int64_t r0 = (task % blocks) * rb, r1 = std::min(T, r0 + rb);
      float* dS = dS_all + bh * T * T + r0 * T;
      const float* dO = dout + h.out_off + r0 * D;
      gemm(false, true, r1 - r0, r1, hd, 1.0f, dO, D, h.v, 3 * D, 0.0f, dS, T);
      for (int64_t t = r0; t < r1; ++t) {
        causal_softmax_backward_row(h.P + t * T, dS_all + bh * T * T + t * T, t, T, scale);
        round_causal_row_if(s.bf16_operands, dS_all + bh * T * T + t * T, t);
      }
      gemm(false, false, r1 - r0, hd, r1, 1.0f, dS, T, h.k, 3 * D, 0.0f, dqkv + h.qkv_off + r0 * 3 * D, 3 * D);
    }
    // Key rows j0..j1 see query rows j0..T-1: dV = P^T dO, dK = dS^T Q.
#pragma omp parallel for schedule(static) if(worth_parallel(BH * T * T))
    for (int64_t task = 0; task < BH * blocks; ++task) {
      int64_t bh = task / blocks;
      Head h = head_of(s, qkv, probs, bh);
      int64_t j0 = (task % blocks) * rb, j1 = std::min(T, j0 + rb);
      float* dk = dqkv + h.qkv_off + D + j0 * 3 * D;
      gemm(true, false, j1 - j0, hd, T - j0, 1.0f, h.P + j0 * T + j0, T, dout + h.out_off + j0 * D, D, 0.0f,
           dk + D, 3 * D);
      gemm(true, false, j1 - j0, hd, T - j0, 1.0f, dS_all + bh * T * T + j0 * T + j0, T, h.q + j0 * 3 * D,
           3 * D, 0.0f, dk, 3 * D);
    }
    return;
  }
  for (int64_t bh = 0; bh < BH; ++bh) {
    Head h = head_of(s, qkv, probs, bh);
    const float* dO = dout + h.out_off;
    float* dq = dqkv + h.qkv_off;
    gemm(false, true, T, T, hd, 1.0f, dO, D, h.v, 3 * D, 0.0f, dS_all + bh * T * T, T);  // dP
    gemm(true, false, T, hd, T, 1.0f, h.P, T, dO, D, 0.0f, dq + 2 * D, 3 * D);          // dV
  }
#pragma omp parallel for schedule(static) if(worth_parallel(BH * T * T))
  for (int64_t bh = 0; bh < BH; ++bh)
    for (int64_t t = 0; t < T; ++t) {
      causal_softmax_backward_row(probs + (bh * T + t) * T, dS_all + (bh * T + t) * T, t, T, scale);
      round_causal_row_if(s.bf16_operands, dS_all + (bh * T + t) * T, t);
    }
  for (int64_t bh = 0; bh < BH; ++bh) {
    Head h = head_of(s, qkv, probs, bh);
    const float* g = dS_all + bh * T * T;
    float* dq = dqkv + h.qkv_off;
    gemm(false, false, T, hd, T, 1.0f, g, T, h.k, 3 * D, 0.0f, dq, 3 * D);     // dQ
    gemm(true, false, T, hd, T, 1.0f, g, T, h.q, 3 * D, 0.0f, dq + D, 3 * D);  // dK
  }
}

}  // namespace pd::cpu
