#pragma once
// Causal multi-head attention core (between the qkv and output
// projections). Layout: qkv [B, T, 3D] holding q | k | v, head h owning
// columns h*hd .. h*hd+hd-1 of each; out [B, T, D]; probs [B, H, T, T]
// (softmax rows, zero above the diagonal) saved for backward.
#include <cstdint>

namespace pd::cpu {

struct AttentionShape {
  int64_t batch = 0, seq = 0, heads = 0, head_dim = 0;
  // --precision bf16: the softmax probabilities (forward) and dS (backward)
  // are rounded to bf16 before they enter a GEMM, as a bf16 flash kernel does.
  bool bf16_operands = false;
  int64_t dim() const { return heads * head_dim; }
};

// out = softmax(mask(q k^T / sqrt(hd))) v per (batch, head).
void attention_forward(const AttentionShape& s, const float* qkv, float* probs, float* out);

// Writes dqkv [B, T, 3D] (every element) from dout [B, T, D].
void attention_backward(const AttentionShape& s, const float* qkv, const float* probs,
                        const float* dout, float* dqkv);

// Row-wise causal softmax of a [T, T] score matrix in place: row t is
// normalised over columns 0..t (max subtracted first), columns after t
// are set to 0.
void causal_softmax_rows(float* scores, int64_t T);

}  // namespace pd::cpu
