#pragma once
// The seam between the compute core and its backends: the layers own the
// maths, a backend owns the kernels. Every backend fills one DeviceOps
// table - the CPU's (core/cpu/ops_table.cpp, always there) and CUDA's
// (core/cuda/ops_table.cpp, library pd_core_cuda, registered with
// register_device_ops() when pd::cuda::initialize_backend() runs; pd_core
// never links CUDA). A layer calls device_ops(x.device()).<kernel>(...)
// whatever device x lives on, with no per-device branch.
//
// Conventions, shared by every entry:
// - Pointers are memory of the table's device: host memory for the CPU;
//   for CUDA, device pointers on the current device of the calling thread
//   (one process per GPU), work queued on that device's compute stream, in
//   call order, entries returning without waiting for it unless the entry
//   says it synchronises. The CPU's entries run to completion on the
//   calling thread (and its OpenMP team).
// - Layouts are the CPU kernels' layouts: row-major, NCHW, [rows, cols].
// - Entries named *_accum ADD into their outputs (parameter gradients),
//   as Layer::backward promises; all others overwrite.
// - Every entry is deterministic: same inputs, same device, same bits.
//   Convolutions need set_deterministic(true) for that (cuDNN otherwise
//   may pick faster atomics-based algorithms).
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "core/geometry.h"  // Conv2dGeometry, Pool2dGeometry, PoolKind
#include "core/op_times.h"
#include "core/precision.h"
#include "core/strided_ops.h"
#include "core/tensor.h"

namespace pd {

// Key of a dropout mask, the same as cpu::DropoutKey (core/cpu/dropout_kernels.h):
// element i is kept iff uniform01 of word i%4 of Philox block
// (i/4 | substream << 32) of CounterRng(seed, layer_index, minibatch_id) is
// >= p, and a kept element is multiplied by 1 / (1 - p) computed in float.
// With substream 0 that is CounterRng(...).uniform(i) >= p.
struct DropoutKey {
  uint64_t seed = 0;
  uint32_t layer_index = 0;
  uint32_t minibatch_id = 0;
  uint32_t substream = 0;  // several dropouts inside one top-level layer (transformer block)
};

// The most dimensions a strided-tensor entry takes (ONNX graphs: attention's
// [batch, heads, T, T] and its reshapes stay well below).
inline constexpr int kMaxStridedRank = 8;

struct DeviceOps {
  const char* name = "";

  // --- runtime ---
  void (*synchronize)() = nullptr;  // waits for this device's streams
  // cuDNN algorithm choice restricted to deterministic ones (--deterministic).
  void (*set_deterministic)(bool on) = nullptr;
  // Timing for the profiler: record an event on the compute stream; the
  // elapsed time between two recorded events (waits for the second).
  uint64_t (*event_record)() = nullptr;
  float (*event_elapsed_ms)(uint64_t start, uint64_t end) = nullptr;
  void (*event_release)(uint64_t event) = nullptr;

  // --- host-to-device staging for the data loader (CUDA only; null on the CPU) ---
  void* (*pinned_alloc)(size_t bytes) = nullptr;  // page-locked host memory
  void (*pinned_free)(void* p) = nullptr;
  // Copies pinned host memory to the device on a copy stream of its own,
  // after the work queued on the compute stream so far (dst may be memory
  // that work used); returns the copy's event.
  uint64_t (*upload_async)(void* dst, const void* pinned_src, size_t bytes) = nullptr;
  // Compute-stream work queued after this call waits for the copy.
  void (*upload_wait_on_compute)(uint64_t event) = nullptr;
  // Blocks until the copy has finished (its source may be reused); releases the event.
  void (*upload_release)(uint64_t event) = nullptr;

  // --- BLAS: same contract as cpu::gemm (row-major, strides in elements) ---
  void (*gemm)(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
               const float* A, int64_t lda, const float* B, int64_t ldb, float beta, float* C,
               int64_t ldc) = nullptr;
  // batch independent GEMMs; matrix b starts at A + b*stride_a (etc.).
  void (*gemm_strided_batched)(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K,
                               float alpha, const float* A, int64_t lda, int64_t stride_a,
                               const float* B, int64_t ldb, int64_t stride_b, float beta, float* C,
                               int64_t ldc, int64_t stride_c, int64_t batch) = nullptr;

  // --- linear layer: y = x Wᵀ + b over rows; x [rows, in], W [out, in] ---
  // b may be null. Precision, here and in the convolution and attention
  // entries, is the caller's StepInfo::precision (the one way it travels):
  // under BF16 a backend may run the GEMM or convolution on bf16 copies of
  // the operands with FP32 accumulation (CUDA) - exact, because the layers
  // round every operand to bf16 first, so the CPU's FP32 products are the
  // same; under FP32 it computes in FP32 (TF32 only with --allow-tf32).
  void (*linear_forward)(Precision p, int64_t rows, int64_t in, int64_t out, const float* x, const float* w,
                         const float* b, float* y) = nullptr;
  // dx = dy W (overwritten).
  void (*linear_backward_input)(Precision p, int64_t rows, int64_t in, int64_t out, const float* dy, const float* w,
                                float* dx) = nullptr;
  // dw += dyᵀ x; db += column sums of dy (db may be null).
  void (*linear_backward_params_accum)(Precision p, int64_t rows, int64_t in, int64_t out, const float* x,
                                       const float* dy, float* dw, float* db) = nullptr;

  // --- convolution (cuDNN; CPU: im2col + GEMM); bias may be null ---
  // Any Conv2dGeometry: groups, rectangular kernels, per-axis strides and
  // per-side pads. The CPU runs the core layers' case (square window, one
  // group) on its fast kernels and the rest on im2col + GEMM per sample and
  // group; CUDA runs cuDNN, on a zero-padded copy of x where the pads differ
  // before and after an axis.
  void (*conv2d_forward)(Precision p, const Conv2dGeometry& g, const float* x, const float* w, const float* bias,
                         float* y) = nullptr;
  void (*conv2d_backward_data)(Precision p, const Conv2dGeometry& g, const float* w, const float* dy,
                               float* dx) = nullptr;
  // dw += dL/dw; dbias += dL/dbias when dbias is not null.
  void (*conv2d_backward_params_accum)(Precision p, const Conv2dGeometry& g, const float* x, const float* dy,
                                       float* dw, float* dbias) = nullptr;

  // --- pooling (cuDNN; CPU: own kernels) ---
  // Any Pool2dGeometry. CUDA runs cuDNN where the pads are symmetric per
  // axis and the mode is floor, its own kernels otherwise (backward: each
  // input cell sums its windows in output order, no atomics).
  void (*pool2d_forward)(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y) = nullptr;
  void (*pool2d_backward)(PoolKind kind, const Pool2dGeometry& g, const float* x, const float* y,
                          const float* dy, float* dx) = nullptr;
  // What the layers' pooling backward reads, so that they save only that:
  // cuDNN re-derives the routing from x and y (true); the CPU kernels read
  // the argmax max pooling's forward wrote, and average pooling nothing but
  // the geometry (false).
  bool pool_backward_reads_tensors = false;
  // The entries the layers call. argmax: int32 [N, C, OH, OW], written by
  // max pooling when !pool_backward_reads_tensors, else null (and null for
  // average pooling); x and y are null in backward when
  // !pool_backward_reads_tensors.
  void (*pool2d_forward_indexed)(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y,
                                 int32_t* argmax) = nullptr;
  void (*pool2d_backward_indexed)(PoolKind kind, const Pool2dGeometry& g, const float* x, const float* y,
                                  const int32_t* argmax, const float* dy, float* dx) = nullptr;
  // torch.nn.AdaptiveAvgPool2d over planes = batch * channels; x and y as
  // for pool2d_backward_indexed. CUDA runs only output sizes that divide
  // the input (a UserError otherwise).
  void (*adaptive_avgpool2d_forward)(int64_t planes, int64_t in_h, int64_t in_w, int64_t out_h,
                                     int64_t out_w, const float* x, float* y) = nullptr;
  void (*adaptive_avgpool2d_backward)(int64_t planes, int64_t in_h, int64_t in_w, int64_t out_h,
                                      int64_t out_w, const float* x, const float* y, const float* dy,
                                      float* dx) = nullptr;

  // --- batch norm over N,H,W per channel (cuDNN, spatial mode) ---
  // Training: normalises with batch statistics, writes save_mean and
  // save_invstd ([C], for backward) and updates running stats as
  // running = (1 - momentum) * running + momentum * batch (variance
  // unbiased), like PyTorch.
  void (*batchnorm_forward_train)(int64_t n, int64_t c, int64_t h, int64_t w, const float* x,
                                  const float* gamma, const float* beta, float momentum, float eps,
                                  float* running_mean, float* running_var, float* save_mean,
                                  float* save_invstd, float* y) = nullptr;
  void (*batchnorm_forward_eval)(int64_t n, int64_t c, int64_t h, int64_t w, const float* x,
                                 const float* gamma, const float* beta, const float* running_mean,
                                 const float* running_var, float eps, float* y) = nullptr;
  // dx overwritten; dgamma, dbeta accumulated.
  void (*batchnorm_backward)(int64_t n, int64_t c, int64_t h, int64_t w, const float* x,
                             const float* dy, const float* gamma, const float* save_mean,
                             const float* save_invstd, float eps, float* dx, float* dgamma_accum,
                             float* dbeta_accum) = nullptr;
  // Backward of eval mode (fixed statistics): dx = dy * gamma * invstd
  // (dx may be null), dgamma += sum dy * (x - mean) * invstd, dbeta += sum dy,
  // with invstd = 1 / sqrt(running_var + eps).
  void (*batchnorm_backward_eval)(int64_t n, int64_t c, int64_t h, int64_t w, const float* x,
                                  const float* dy, const float* gamma, const float* running_mean,
                                  const float* running_var, float eps, float* dx,
                                  float* dgamma_accum, float* dbeta_accum) = nullptr;
  // The input half of the backward, what Layer::backward_input runs: dx
  // (may be null) and the per-channel parameter gradients dgamma, dbeta
  // [C], OVERWRITTEN - with batch statistics dx needs those sums anyway;
  // backward_weights adds them to the gradients. training: stat_mean,
  // stat_b are batchnorm_forward_train's save_mean and save_invstd; eval:
  // the running mean and variance (stat_b a variance, not an invstd).
  void (*batchnorm_backward_input)(bool training, int64_t n, int64_t c, int64_t h, int64_t w,
                                   const float* x, const float* dy, const float* gamma,
                                   const float* stat_mean, const float* stat_b, float eps, float* dx,
                                   float* dgamma, float* dbeta) = nullptr;

  // --- elementwise (own kernels); y may alias x ---
  // y = x <= 0 ? +0 : x: NaN passes (as in PyTorch), and relu commutes
  // with bf16 rounding bit for bit (core/layer.h).
  void (*relu_forward)(int64_t n, const float* x, float* y) = nullptr;
  // dx = dy where y > 0 (y is relu's output; the input works as well).
  void (*relu_backward)(int64_t n, const float* y, const float* dy, float* dx) = nullptr;
  void (*add)(int64_t n, const float* a, const float* b, float* y) = nullptr;        // y = a + b
  // y = max(a + b, 0): the residual join of ResNet blocks.
  void (*add_relu_forward)(int64_t n, const float* a, const float* b, float* y) = nullptr;
  // The same with the result rounded to bf16 as it is written (one pass
  // where relu then round_bf16 take two): round_bf16(relu(x)), which equals
  // relu(round_bf16(x)), and round_bf16(relu(a + b)).
  void (*relu_forward_rounded)(int64_t n, const float* x, float* y) = nullptr;
  void (*add_relu_forward_rounded)(int64_t n, const float* a, const float* b, float* y) = nullptr;
  void (*scale)(int64_t n, float alpha, const float* x, float* y) = nullptr;        // y = alpha x
  void (*axpy)(int64_t n, float alpha, const float* x, float* y) = nullptr;         // y += alpha x
  void (*divide)(int64_t n, float d, const float* x, float* y) = nullptr;          // y = x / d (not x * (1/d))
  // y = round_to_bf16(x) elementwise (core/precision.h: nearest, ties to even); y may alias x.
  void (*round_bf16)(int64_t n, const float* x, float* y) = nullptr;
  void (*gelu_forward)(int64_t n, const float* x, float* y) = nullptr;              // tanh form
  void (*gelu_backward)(int64_t n, const float* x, const float* dy, float* dx) = nullptr;
  // Masks are regenerated from the key in backward: nothing is stored.
  void (*dropout_forward)(int64_t n, float p, DropoutKey key, const float* x, float* y) = nullptr;
  void (*dropout_backward)(int64_t n, float p, DropoutKey key, const float* dy, float* dx) = nullptr;
  // y[r, c] += bias[c]
  void (*add_bias_rows)(int64_t rows, int64_t cols, const float* bias, float* y) = nullptr;
  // out[c] += sum_r x[r, c] (linear bias gradient), fixed summation order.
  void (*sum_rows_accum)(int64_t rows, int64_t cols, const float* x, float* out) = nullptr;
  // y = x permuted: y's dim d is x's dim perm[d]; rank <= 6 (attention heads).
  void (*permute)(int rank, const int64_t* x_shape, const int* perm, const float* x,
                  float* y) = nullptr;

  // --- layer norm over the last dimension ---
  void (*layernorm_forward)(int64_t rows, int64_t dim, const float* x, const float* gamma,
                            const float* beta, float eps, float* y, float* save_mean,
                            float* save_rstd) = nullptr;
  // dx may be null (first stage: no input gradient).
  void (*layernorm_backward)(int64_t rows, int64_t dim, const float* x, const float* dy,
                             const float* gamma, const float* save_mean, const float* save_rstd,
                             float* dx, float* dgamma_accum, float* dbeta_accum) = nullptr;
  // The same in its two halves (Layer::backward_input / backward_weights).
  void (*layernorm_backward_input)(int64_t rows, int64_t dim, const float* x, const float* dy,
                                   const float* gamma, const float* save_mean, const float* save_rstd,
                                   float* dx) = nullptr;
  void (*layernorm_backward_params_accum)(int64_t rows, int64_t dim, const float* x, const float* dy,
                                          const float* save_mean, const float* save_rstd,
                                          float* dgamma_accum, float* dbeta_accum) = nullptr;

  // --- softmax cross-entropy: logits [rows, classes], labels int32 [rows] ---
  // grad (may be null, may alias logits) = (softmax - onehot) * grad_scale. Synchronises and
  // returns on the host the summed loss (in row order, in double) and the
  // rows whose first argmax equals the label. Throws RuntimeFailure on a
  // label outside [0, classes).
  void (*softmax_cross_entropy)(int64_t rows, int64_t classes, const float* logits,
                                const int32_t* labels, float grad_scale, float* grad,
                                double* loss_sum, int64_t* correct) = nullptr;

  // --- attention: scores [batch, T, T]; probs = causal softmax(scale * scores) ---
  // Entries above the diagonal are 0 in probs. probs may alias scores.
  void (*causal_softmax_forward)(int64_t batch, int64_t T, float scale, const float* scores,
                                 float* probs) = nullptr;
  // dscores = scale * probs * (dprobs - rowsum(dprobs * probs)); may alias dprobs.
  void (*causal_softmax_backward)(int64_t batch, int64_t T, float scale, const float* probs,
                                  const float* dprobs, float* dscores) = nullptr;

  // --- causal multi-head attention between the qkv and output projections ---
  // qkv [batch, T, 3, heads, head_dim] (q | k | v); probs [batch, heads, T, T]
  // = causal softmax(q kᵀ / sqrt(head_dim)), zero above the diagonal, saved
  // for backward; att [batch, T, heads, head_dim] = probs v. Under BF16
  // both round their internal GEMM operands (the probabilities before PV,
  // dS before dQ and dK) on every backend.
  void (*attention_forward)(Precision p, int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                            const float* qkv, float* probs, float* att) = nullptr;
  // dqkv (every element overwritten) from datt.
  void (*attention_backward)(Precision p, int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                             const float* qkv, const float* probs, const float* datt, float* dqkv) = nullptr;

  // --- fused causal attention (CUDA with cuDNN; null on the CPU) ---
  // The same maths and layouts as attention_forward/backward, in one
  // flash-attention kernel each way that never materialises probs: q, k, v
  // (and att, datt in backward) are rounded to bf16, products accumulate
  // and the softmax runs in FP32, att and dqkv come back as bf16 values.
  // stats [batch, heads, T] FP32 = log-sum-exp of each row of the scaled,
  // masked scores, written by forward and read by backward in place of
  // probs. Used by the layers under --precision bf16 only.
  // fused_attention_supported: whether this shape runs (cuDNN can build
  // plans for it under the current set_deterministic); false, and a line on
  // stderr once per shape, when it cannot - callers then use attention_*.
  bool (*fused_attention_supported)(int64_t batch, int64_t T, int64_t heads, int64_t head_dim) = nullptr;
  void (*fused_attention_forward)(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const float* qkv,
                                  float* att, float* stats) = nullptr;
  // dqkv (every element overwritten) from datt; att is forward's output.
  // Bitwise reproducible only under set_deterministic(true) (cuDNN's
  // deterministic backward); the forward always is.
  void (*fused_attention_backward)(int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const float* qkv,
                                   const float* att, const float* stats, const float* datt,
                                   float* dqkv) = nullptr;

  // --- embedding: tokens int32 [batch, T] (host or device pointer noted) ---
  // y[b, t, :] = wte[tokens[b, t], :] + wpe[t, :]. Throws RuntimeFailure
  // (after synchronising) on a token outside [0, vocab).
  void (*embedding_forward)(int64_t batch, int64_t T, int64_t dim, int64_t vocab,
                            const int32_t* tokens, const float* wte, const float* wpe,
                            float* y) = nullptr;
  // dwte[v] += sum of dy over positions holding v, in position order
  // (deterministic, no atomics); dwpe[t] += sum over the batch. Synchronises.
  void (*embedding_backward_accum)(int64_t batch, int64_t T, int64_t dim, int64_t vocab,
                                   const int32_t* tokens, const float* dy, float* dwte,
                                   float* dwpe) = nullptr;

  // --- optimizers (PyTorch semantics; core/optimizer.cpp calls the multi-tensor entries) ---
  // g = grad + weight_decay * p; buf = momentum * buf + g (buf starts at zero);
  // step = nesterov ? g + momentum * buf : buf (or g when momentum == 0);
  // p -= lr * step. buf may be null when momentum == 0.
  void (*sgd_step)(int64_t n, float lr, float momentum, float weight_decay, bool nesterov, float* p,
                   const float* grad, float* buf) = nullptr;
  // step_count is the 1-based step after this update. decoupled (AdamW):
  // p *= 1 - lr * weight_decay first; otherwise g += weight_decay * p.
  // p -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps).
  void (*adam_step)(int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
                    bool decoupled, int64_t step_count, float* p, const float* grad, float* m,
                    float* v) = nullptr;
  // The same updates on `count` tensors at once (a few launches on CUDA
  // instead of one per tensor), bit for bit what the single-tensor entries
  // do. sizes[i] elements of params_in[i], params_out[i], grads[i] and the
  // state tensors; bufs null when momentum == 0. params_out[i] gets the
  // updated params_in[i]: the same pointer updates in place, another one
  // leaves params_in[i] as it was (weight stashing keeps the old version).
  void (*sgd_step_multi)(int64_t count, const int64_t* sizes, const float* const* params_in,
                         float* const* params_out, const float* const* grads, float* const* bufs, float lr,
                         float momentum, float weight_decay, bool nesterov) = nullptr;
  void (*adam_step_multi)(int64_t count, const int64_t* sizes, const float* const* params_in,
                          float* const* params_out, const float* const* grads, float* const* m, float* const* v,
                          float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled,
                          int64_t step_count) = nullptr;
  // Gradient clipping's norm: sums[i] = sum over k of double(x_i[k])^2,
  // written to HOST memory (`sums` is a host array; a GPU synchronises).
  // Each tensor is summed in fixed blocks whose partial sums are added in a
  // fixed order, so a device gives the same bits whatever its thread count.
  void (*sum_squares_multi)(int64_t count, const int64_t* sizes, const float* const* xs,
                            double* sums) = nullptr;

  // ===== strided tensors: what the ONNX ops run on =====
  // Shapes of up to kMaxStridedRank dimensions; strides in elements (0 on
  // a broadcast dimension).

  // --- pointwise: broadcasting arithmetic, unary maps, Where, reductions, softmax on one axis ---

  // Operands are read at offset sum_d index[d] * strides[d] over the
  // output's `shape` (rank dims, at most kMaxStridedRank; rank 0 is one
  // element); outputs are dense row-major. Gradients of a broadcast operand
  // are summed in increasing order of the output's flat index, from +0,
  // on every backend (one fixed order per element: same bits every run).
  // "Dense broadcast strides" of an operand: the row-major strides of its
  // own dense shape, right-aligned to `shape`, 0 on every dimension it has
  // size 1 or lacks (onnx broadcast_strides).

  // y = a op b (op: Add, Sub, Mul, Div; IEEE division).
  void (*broadcast_binary)(BinaryArith op, int rank, const int64_t* shape, const int64_t* a_strides,
                           const int64_t* b_strides, const float* a, const float* b, float* y) = nullptr;
  // The input gradients of Mul and Div (Add and Sub need only
  // reduce_sum_strided): per element, Mul: dy * b to a, dy * a to b; Div:
  // dy / b to a, -(dy * a / (b * b)) to b; each summed into the operand's
  // element (da, db dense in the operands' shapes, overwritten; either may
  // be null). a_strides, b_strides: dense broadcast strides.
  void (*broadcast_binary_backward)(BinaryArith op, int rank, const int64_t* shape, const int64_t* a_strides,
                                    const int64_t* b_strides, const float* a, const float* b, const float* dy,
                                    float* da, float* db) = nullptr;
  // y[offset(i)] = sum of x[i] over x dense in `shape`, with y_strides the
  // dense broadcast strides of y's shape: sums over the dimensions where y
  // has size 1 (a gradient down to a broadcast operand, ReduceSum); y
  // overwritten, every element written (0 when nothing adds to it).
  void (*reduce_sum_strided)(int rank, const int64_t* shape, const int64_t* y_strides, const float* x,
                             float* y) = nullptr;
  // y = f(x) elementwise; y may alias x.
  void (*unary_forward)(UnaryParams f, int64_t n, const float* x, float* y) = nullptr;
  // dx = dy * f'(x); saved is f's output when unary_backward_reads_output(f.fn)
  // (core/strided_ops.h), else its input. dx may alias dy.
  void (*unary_backward)(UnaryParams f, int64_t n, const float* saved, const float* dy, float* dx) = nullptr;
  // out = cond ? x : y, cond one byte per element (nonzero: true), all three strided.
  void (*where_forward)(int rank, const int64_t* shape, const int64_t* cond_strides, const int64_t* x_strides,
                        const int64_t* y_strides, const uint8_t* cond, const float* x, const float* y,
                        float* out) = nullptr;
  // Full-shape gradients (dense in `shape`): dx = cond ? dout : 0,
  // dy = cond ? 0 : dout; either may be null. Callers sum them to the
  // operands' shapes with reduce_sum_strided.
  void (*where_backward)(int rank, const int64_t* shape, const int64_t* cond_strides, const uint8_t* cond,
                         const float* dout, float* dx, float* dy) = nullptr;
  // Softmax over the middle dimension of x viewed [outer, len, inner]:
  // max-shifted exponentials, their sum accumulated in double in k order,
  // multiplied by float(1 / sum).
  void (*softmax_axis_forward)(int64_t outer, int64_t len, int64_t inner, const float* x, float* y) = nullptr;
  // dx = y * (dy - float(sum_k y dy)), the dot accumulated in double in k order.
  void (*softmax_axis_backward)(int64_t outer, int64_t len, int64_t inner, const float* y, const float* dy,
                                float* dx) = nullptr;

  // (end of pointwise)

  // --- layout: strided copies (Transpose, Slice, Concat, Split, Pad, Expand), index selection ---
  // y[sum_d i_d * y_strides[d]] = x[sum_d i_d * x_strides[d]] for every
  // index (i_0, ..., i_{rank-1}) of `shape` (rank 0 .. kMaxStridedRank;
  // rank 0 copies one element, an empty shape nothing). x and y point at
  // the element of index 0, possibly inside a larger tensor (a slice's
  // start, a concatenation's slab); x's strides may be 0 (broadcast:
  // Expand) or negative (Slice with negative steps); y's reach each element
  // at most once; x and y do not overlap.
  void (*strided_copy)(int rank, const int64_t* shape, const float* x, const int64_t* x_strides, float* y,
                       const int64_t* y_strides) = nullptr;
  // Selection along one axis (Gather): x viewed as [outer, len, inner], y
  // as [outer, count, inner]; y[o, j, :] = x[o, index[j], :], a negative
  // index counting from the end (numpy). index: `count` integers of
  // index_dtype (I32 or I64) in the table's memory. Returns whether every
  // index lies in [-len, len) (y is unspecified where one does not);
  // synchronises on CUDA to tell.
  bool (*index_select_forward)(int64_t outer, int64_t len, int64_t inner, int64_t count, DType index_dtype,
                               const void* index, const float* x, float* y) = nullptr;
  // Its backward: dx[o, k, :] += dy[o, j, :] for every j whose index
  // resolves to k, added in increasing j (deterministic, no atomics: the
  // same bits on every backend). Indices out of range: RuntimeFailure.
  // Synchronises on CUDA (the positions are grouped by index on the host).
  void (*index_select_backward_accum)(int64_t outer, int64_t len, int64_t inner, int64_t count, DType index_dtype,
                                      const void* index, const float* dy, float* dx) = nullptr;
  // (end of layout)

  // --- fused transformer-block pieces: one pass where the unfused sequence
  // makes several. Each gives the values of the sequence it names, with
  // the rounding to bf16 (round_bf16) at the same points under BF16 and no
  // rounding under FP32; the CPU runs exactly that sequence (same bits). ---
  // pre = x Wᵀ + b (linear_forward; b not null), y = gelu(pre); under BF16 pre is
  // rounded before the GELU and y after it. pre is what backward reads.
  void (*linear_gelu_forward)(Precision p, int64_t rows, int64_t in, int64_t out, const float* x, const float* w,
                              const float* b, float* pre, float* y) = nullptr;
  // dx = dy * gelu'(pre) (gelu_backward), rounded under BF16. dx must not alias pre or dy.
  void (*gelu_backward_rounded)(Precision p, int64_t n, const float* pre, const float* dy, float* dx) = nullptr;
  // s = a + r (add; r null: no add, s unused and may be null), then
  // layernorm_forward of s (of a when r is null) into y, mean, rstd; y
  // rounded under BF16, s never (the residual stream stays FP32).
  void (*add_layernorm_forward)(Precision p, int64_t rows, int64_t dim, const float* a, const float* r,
                                const float* gamma, const float* beta, float eps, float* s, float* y,
                                float* save_mean, float* save_rstd) = nullptr;
  // dx = dres + round(layernorm_backward_input(...)) under BF16, without the
  // rounding under FP32; dres null: no add. dx may alias dres.
  void (*layernorm_backward_input_add)(Precision p, int64_t rows, int64_t dim, const float* x, const float* dy,
                                       const float* gamma, const float* save_mean, const float* save_rstd,
                                       const float* dres, float* dx) = nullptr;

  // --- bf16 storage (--precision bf16): the transformer block's MLP keeps
  // its activations and their gradients as bf16 (uint16_t: the upper half
  // of the float's bits, core/precision.h), half the bytes of the FP32
  // tensors holding the same values. Each entry gives the values (and
  // rounding points) of the BF16 entry it names, reading and writing bf16
  // where it says; the CPU runs exactly that entry between unpacking and
  // packing (same bits). Weights, biases, LayerNorm's inputs and
  // statistics and the residual stream stay FP32. ---
  // Whether layers should use these entries by default (core/bf16_rounding.h).
  bool bf16_storage_pays = false;
  // y = bf16 of x (round_to_bf16: nearest, ties to even) / x as floats (exact).
  void (*pack_bf16)(int64_t n, const float* x, uint16_t* y) = nullptr;
  void (*unpack_bf16)(int64_t n, const uint16_t* x, float* y) = nullptr;
  // linear_forward of a bf16 x rounded to bf16, into y (FP32 storage) or
  // y16 (bf16): exactly one of them is not null.
  void (*linear_forward_bf16)(int64_t rows, int64_t in, int64_t out, const uint16_t* x, const float* w,
                              const float* b, float* y, uint16_t* y16) = nullptr;
  // linear_gelu_forward under BF16 of a bf16 x into bf16 pre and y.
  void (*linear_gelu_forward_bf16)(int64_t rows, int64_t in, int64_t out, const uint16_t* x, const float* w,
                                   const float* b, uint16_t* pre, uint16_t* y) = nullptr;
  // linear_backward_input(dy, w) rounded to bf16, into dx (FP32 storage) or
  // dx16 (bf16): exactly one of them is not null.
  void (*linear_backward_input_bf16)(int64_t rows, int64_t in, int64_t out, const uint16_t* dy, const float* w,
                                     float* dx, uint16_t* dx16) = nullptr;
  // linear_backward_params_accum of bf16 x and dy (dw, db FP32; db may be null).
  void (*linear_backward_params_accum_bf16)(int64_t rows, int64_t in, int64_t out, const uint16_t* x,
                                            const uint16_t* dy, float* dw, float* db) = nullptr;
  // gelu_backward_rounded under BF16, all three bf16 (dx must not alias pre or dy).
  void (*gelu_backward_bf16)(int64_t n, const uint16_t* pre, const uint16_t* dy, uint16_t* dx) = nullptr;
  // add_layernorm_forward under BF16 with y bf16 (s, mean, rstd FP32).
  void (*add_layernorm_forward_bf16)(int64_t rows, int64_t dim, const float* a, const float* r, const float* gamma,
                                     const float* beta, float eps, float* s, uint16_t* y, float* save_mean,
                                     float* save_rstd) = nullptr;
  // layernorm_backward_input_add under BF16 of a bf16 dy (dx, dres FP32).
  void (*layernorm_backward_input_add_bf16)(int64_t rows, int64_t dim, const float* x, const uint16_t* dy,
                                            const float* gamma, const float* save_mean, const float* save_rstd,
                                            const float* dres, float* dx) = nullptr;
  // layernorm_backward_params_accum of a bf16 dy.
  void (*layernorm_backward_params_accum_bf16)(int64_t rows, int64_t dim, const float* x, const uint16_t* dy,
                                               const float* save_mean, const float* save_rstd, float* dgamma,
                                               float* dbeta) = nullptr;
  // softmax_cross_entropy of bf16 logits, grad (may be null, may alias
  // logits) bf16 rounded from the FP32 gradient.
  void (*softmax_cross_entropy_bf16)(int64_t rows, int64_t classes, const uint16_t* logits, const int32_t* labels,
                                     float grad_scale, uint16_t* grad, double* loss_sum, int64_t* correct) = nullptr;
  // fused_attention_forward/backward with qkv, att, datt and dqkv bf16
  // (stats FP32); null where fused_attention_* are (the CPU).
  void (*fused_attention_forward_bf16)(int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                                       const uint16_t* qkv, uint16_t* att, float* stats) = nullptr;
  void (*fused_attention_backward_bf16)(int64_t batch, int64_t T, int64_t heads, int64_t head_dim,
                                        const uint16_t* qkv, const uint16_t* att, const float* stats,
                                        const uint16_t* datt, uint16_t* dqkv) = nullptr;
};

namespace detail {
inline const DeviceOps*& cuda_ops_slot() {
  static const DeviceOps* ops = nullptr;
  return ops;
}
}  // namespace detail

// Called by a backend when it initialises; the table must outlive the process.
inline void register_device_ops(DeviceKind kind, const DeviceOps* ops) {
  PD_CHECK(kind == DeviceKind::CUDA, "only CUDA device ops can be registered");
  detail::cuda_ops_slot() = ops;
}

// The CPU's table (core/cpu/ops_table.cpp), filled from the cpu:: kernels.
const DeviceOps& cpu_device_ops();

inline bool has_device_ops(Device d) { return d.is_cpu() || detail::cuda_ops_slot() != nullptr; }

namespace detail {
// The table that times `backend`'s entries (core/op_times.cpp).
const DeviceOps& timed_device_ops(const DeviceOps& backend);
}  // namespace detail

// The kernels for tensors on device d (their timed copy while op timing is
// on, core/op_times.h).
inline const DeviceOps& device_ops(Device d) {
  const DeviceOps* ops = d.is_cpu() ? &cpu_device_ops() : detail::cuda_ops_slot();
  if (!ops)
    throw UserError("a tensor is on " + d.str() +
                    " but the CUDA backend is not initialised (built without CUDA, no GPU "
                    "visible, or pd::cuda::initialize_backend() was not called): use --device cpu");
  if (op_timing_active()) [[unlikely]]
    return detail::timed_device_ops(*ops);
  return *ops;
}

}  // namespace pd
