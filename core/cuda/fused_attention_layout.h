#pragma once
// The pure parts of fused attention (fused_attention.h): which shapes cuDNN's
// fused flash attention is asked to run, the strided [batch, heads, T, hd]
// views that cuDNN's SDPA graphs read out of the layers' layouts, and the key
// under which a built plan is cached. Header-only and free of CUDA so that the
// CPU test suite checks it.
//
// Layouts (core/device_ops.h, attention_forward): qkv [B, T, 3, H, hd],
// att [B, T, H, hd], stats [B, H, T]. cuDNN's graphs index every tensor as
// [b, h, s, d]; a view is those four dimensions with strides in elements
// into one of the layer buffers, plus an element offset from its start.
#include <array>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>

namespace pd::cuda {

struct AttentionShape {
  int64_t batch = 0, T = 0, heads = 0, head_dim = 0;
};

// A 4-D strided view into a buffer: element (b, h, s, d) lies at
// offset + b*stride[0] + h*stride[1] + s*stride[2] + d*stride[3].
struct View4 {
  std::array<int64_t, 4> dim{}, stride{};
  int64_t offset = 0;
};

// Swaps the last two dimensions (a transposed view of the same memory).
inline View4 transposed(View4 v) {
  std::swap(v.dim[2], v.dim[3]);
  std::swap(v.stride[2], v.stride[3]);
  return v;
}

// q, k, v as [B, H, T, hd] views of a packed qkv [B, T, 3, H, hd]; the same
// views address dq, dk, dv in a packed dqkv of that layout.
inline View4 qkv_part_view(const AttentionShape& s, int part) {
  const int64_t row = 3 * s.heads * s.head_dim;  // elements per token
  return {{s.batch, s.heads, s.T, s.head_dim}, {s.T * row, s.head_dim, row, 1}, part * s.heads * s.head_dim};
}

// The attention output (and its gradient) [B, T, H, hd] as [B, H, T, hd].
inline View4 output_view(const AttentionShape& s) {
  const int64_t row = s.heads * s.head_dim;
  return {{s.batch, s.heads, s.T, s.head_dim}, {s.T * row, s.head_dim, row, 1}, 0};
}

// Per-row softmax statistics [B, H, T] as [B, H, T, 1].
inline View4 row_stats_view(const AttentionShape& s) {
  return {{s.batch, s.heads, s.T, 1}, {s.heads * s.T, s.T, 1, 1}, 0};
}

// Scores [B, H, T, T], row-major (cuDNN's virtual intermediates).
inline View4 scores_view(const AttentionShape& s) {
  return {{s.batch, s.heads, s.T, s.T}, {s.heads * s.T * s.T, s.T * s.T, s.T, 1}, 0};
}

// A dense [B, H, T, hd] FP32 buffer (the non-deterministic backward's dq accumulator).
inline View4 dense_heads_view(const AttentionShape& s) {
  return {{s.batch, s.heads, s.T, s.head_dim},
          {s.heads * s.T * s.head_dim, s.T * s.head_dim, s.head_dim, 1},
          0};
}

// Largest head dimension handed to cuDNN: its flash kernels cover head
// dimensions up to 128 forward and backward on sm80/sm90 for bf16.
constexpr int64_t kMaxFusedHeadDim = 128;

// Empty when cuDNN's fused attention may be asked for this shape, else the
// reason it is not. The head dimension must be a multiple of 8 so that every
// bf16 view starts 16-byte aligned (q, k, v lie H*hd elements apart) and its
// rows are whole 16-byte vectors, which the tensor-core kernels need.
inline std::string fused_attention_shape_problem(const AttentionShape& s) {
  if (s.batch < 1 || s.T < 1 || s.heads < 1 || s.head_dim < 1) return "empty shape";
  if (s.head_dim % 8 != 0) return "head_dim " + std::to_string(s.head_dim) + " is not a multiple of 8";
  if (s.head_dim > kMaxFusedHeadDim)
    return "head_dim " + std::to_string(s.head_dim) + " exceeds " + std::to_string(kMaxFusedHeadDim);
  return {};
}

enum class FusedPass : uint8_t { Forward, Backward };

// A built plan depends on the shape, the pass and, for the backward, on
// --deterministic (a different graph: see fused_attention.h).
struct FusedPlanKey {
  int64_t batch = 0, T = 0, heads = 0, head_dim = 0;
  FusedPass pass = FusedPass::Forward;
  bool deterministic = false;
  auto tie() const { return std::tie(batch, T, heads, head_dim, pass, deterministic); }
  bool operator<(const FusedPlanKey& o) const { return tie() < o.tie(); }
  bool operator==(const FusedPlanKey& o) const { return tie() == o.tie(); }
};

// The forward graph never depends on --deterministic (it has no
// accumulation across thread blocks), so both settings share its plan.
inline FusedPlanKey fused_plan_key(const AttentionShape& s, FusedPass pass, bool deterministic) {
  return {s.batch, s.T, s.heads, s.head_dim, pass, pass == FusedPass::Backward && deterministic};
}

}  // namespace pd::cuda
