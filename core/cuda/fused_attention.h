#pragma once
// Fused causal attention through cuDNN's graph (backend) API: the flash
// scaled-dot-product attention forward (training mode: it writes the
// softmax log-sum-exp per row) and backward, with bf16 inputs and outputs
// and FP32 accumulation and softmax. Contracts of the three entries in
// core/device_ops.h (fused_attention_*); layouts and shape rules in
// fused_attention_layout.h.
//
// Plans are built once per (batch, T, heads, head_dim, pass, deterministic)
// and cached for the process; a shape cuDNN cannot build is remembered too
// and reported once on stderr, after which fused_attention_supported says
// false and the layers use attention_forward/backward.
//
// Determinism: the forward has no cross-block accumulation, so the same
// inputs give the same bits on the same GPU and cuDNN version. The
// backward's dq sums over key blocks: by default cuDNN accumulates it in
// FP32 with atomics (bits may differ from run to run); under
// set_deterministic(true) the graph asks for cuDNN's deterministic variant
// instead (dq written from a dP workspace of B*H*T*T bf16 values, no
// atomics), and the backward is bitwise reproducible.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pd::cuda {

// True when the fused plans for this shape (forward, and backward under the
// current --deterministic) exist or can be built; never throws.
bool fused_attention_supported(int64_t batch, int64_t T, int64_t heads, int64_t head_dim);

// qkv [B, T, 3, H, hd] and att [B, T, H, hd] FP32 holding bf16 values (they
// are rounded to bf16 when packed); stats [B, H, T] FP32. Throw
// RuntimeFailure naming the cuDNN call, descriptor and attribute on failure.
void fused_attention_forward(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const float* qkv,
                             float* att, float* stats);
void fused_attention_backward(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const float* qkv,
                              const float* att, const float* stats, const float* datt, float* dqkv);
// The same on bf16 storage (uint16_t): no packing around cuDNN's graphs.
void fused_attention_forward_bf16(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const uint16_t* qkv,
                                  uint16_t* att, float* stats);
void fused_attention_backward_bf16(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const uint16_t* qkv,
                                   const uint16_t* att, const float* stats, const uint16_t* datt, uint16_t* dqkv);

// For tests and diagnostics: plans cached (built or refused), and a line
// describing the cached plan of a shape (engine index, workspace bytes) or
// why it was refused; empty when none is cached.
size_t fused_attention_plan_count();
std::string fused_attention_plan_info(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, bool backward,
                                      bool deterministic);
void clear_fused_attention_plans();

// Builds the operation graphs of a shape - forward, backward and
// deterministic backward, in each graph form tried - up to the finalised
// operation graph, which needs no GPU, and returns one string per graph:
// empty when every descriptor finalised, else the cuDNN error naming the
// descriptor and attribute. Engine selection is not checked (that needs
// the GPU). For tests on machines without one.
std::vector<std::string> fused_attention_graph_errors(int64_t batch, int64_t T, int64_t heads, int64_t head_dim);

}  // namespace pd::cuda
