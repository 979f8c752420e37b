#pragma once
// Launchers of the backend's own kernels (*.cu). C++17 and free of
// core/tensor.h so that nvcc compiles them; backend.cpp wires them into the
// DeviceOps table (core/device_ops.h documents each operation).
#include <cuda_runtime.h>

#include <cstdint>

namespace pd::cuda::kernels {

void fill_f32(float* p, int64_t n, float v, cudaStream_t s);
void fill_i32(int32_t* p, int64_t n, int32_t v, cudaStream_t s);
void fill_i64(int64_t* p, int64_t n, int64_t v, cudaStream_t s);

void relu_backward(int64_t n, const float* y, const float* dy, float* dx, cudaStream_t s);
void add(int64_t n, const float* a, const float* b, float* y, cudaStream_t s);
// y = relu(x) or relu(a + b) in one pass, rounded to bf16 when `round`.
void relu_forward(int64_t n, const float* x, float* y, bool round, cudaStream_t s);
void add_relu_forward(int64_t n, const float* a, const float* b, float* y, bool round, cudaStream_t s);
void scale(int64_t n, float alpha, const float* x, float* y, cudaStream_t s);
void axpy(int64_t n, float alpha, const float* x, float* y, cudaStream_t s);
void divide(int64_t n, float d, const float* x, float* y, cudaStream_t s);
void gelu_forward(int64_t n, const float* x, float* y, cudaStream_t s);
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx, cudaStream_t s);
void dropout(int64_t n, float p, uint64_t seed, uint32_t a, uint32_t b, uint32_t substream, const float* x,
             float* y, cudaStream_t s);
void add_bias_rows(int64_t rows, int64_t cols, const float* bias, float* y, cudaStream_t s);
// Column sums (column_sum.cu): workspace holds
// column_sum_workspace_floats(rows, cols, outputs) floats (column_sum.h).
void sum_rows_accum(int64_t rows, int64_t cols, const float* x, float* out, float* workspace, cudaStream_t s);
// bf16 (bf16.cu): rounding to nearest even as pd::round_to_bf16; packing
// float -> bf16 bits (exact for bf16 values) and back.
void round_bf16(int64_t n, const float* x, float* y, cudaStream_t s);
void pack_bf16(int64_t n, const float* x, uint16_t* y, cudaStream_t s);
void unpack_bf16(int64_t n, const uint16_t* x, float* y, cudaStream_t s);
void permute(int rank, const int64_t* x_shape, const int* perm, const float* x, float* y,
             cudaStream_t s);

void layernorm_forward(int64_t rows, int64_t dim, const float* x, const float* gamma,
                       const float* beta, float eps, float* y, float* mean, float* rstd,
                       cudaStream_t s);
// dx only; parameter gradients via layernorm_param_grads.
void layernorm_backward_input(int64_t rows, int64_t dim, const float* x, const float* dy,
                              const float* gamma, const float* mean, const float* rstd, float* dx,
                              cudaStream_t s);
void layernorm_param_grads(int64_t rows, int64_t dim, const float* x, const float* dy,
                           const float* mean, const float* rstd, float* dgamma, float* dbeta,
                           float* workspace, cudaStream_t s);  // column_sum.cu, 2 outputs

// Fused transformer-block kernels (fused_block.cu); `round`: the outputs
// named are rounded to bf16 (round_bf16_rne) in the kernel.
// pre[r, c] = round(pre[r, c] + bias[c]) in place; y = round(gelu(pre)).
void bias_gelu_forward(int64_t rows, int64_t cols, const float* bias, bool round, float* pre, float* y,
                       cudaStream_t s);
// dx = round(dy * gelu'(pre)).
void gelu_backward_rounded(int64_t n, bool round, const float* pre, const float* dy, float* dx, cudaStream_t s);
// s = a + r (r null: x = a, s untouched), y = round(layernorm(s)), mean and rstd per row;
// the same arithmetic as layernorm_forward.
void add_layernorm_forward(int64_t rows, int64_t dim, const float* a, const float* r, const float* gamma,
                           const float* beta, float eps, bool round, float* s_out, float* y, float* mean,
                           float* rstd, cudaStream_t s);
// dx = dres + round(layernorm_backward_input(...)) (dres null: no add; dx may alias dres).
void layernorm_backward_input_add(int64_t rows, int64_t dim, const float* x, const float* dy, const float* gamma,
                                  const float* mean, const float* rstd, bool round, const float* dres, float* dx,
                                  cudaStream_t s);

// bf16 storage (uint16_t: the float's upper half), the BF16 forms of the
// kernels above (always rounding): pre = round(acc + bias), y =
// round(gelu(pre)) as bf16; gelu's backward on bf16; the layer norm's y,
// and its backward's dy, as bf16.
void bias_gelu_forward_bf16(int64_t rows, int64_t cols, const float* acc, const float* bias, uint16_t* pre,
                            uint16_t* y, cudaStream_t s);
void gelu_backward_bf16(int64_t n, const uint16_t* pre, const uint16_t* dy, uint16_t* dx, cudaStream_t s);
void add_layernorm_forward_bf16(int64_t rows, int64_t dim, const float* a, const float* r, const float* gamma,
                                const float* beta, float eps, float* s_out, uint16_t* y, float* mean, float* rstd,
                                cudaStream_t s);
void layernorm_backward_input_add_bf16(int64_t rows, int64_t dim, const float* x, const uint16_t* dy,
                                       const float* gamma, const float* mean, const float* rstd, const float* dres,
                                       float* dx, cudaStream_t s);
// y = round(y + bias[col]) in place (bias null: round only), and y16 = bf16
// of acc + bias[col] (bias null: of acc), bf16.cu.
void bias_round(int64_t rows, int64_t cols, const float* bias, float* y, cudaStream_t s);
void bias_pack_bf16(int64_t rows, int64_t cols, const float* acc, const float* bias, uint16_t* y16, cudaStream_t s);
// Column sums of bf16 rows, and layer norm's parameter gradients of a bf16 dy (column_sum.cu).
void sum_rows_accum_bf16(int64_t rows, int64_t cols, const uint16_t* x, float* out, float* workspace,
                         cudaStream_t s);
void layernorm_param_grads_bf16(int64_t rows, int64_t dim, const float* x, const uint16_t* dy, const float* mean,
                                const float* rstd, float* dgamma, float* dbeta, float* workspace, cudaStream_t s);

// Per-row loss and correctness; bad_label set to 1 on a label out of range.
void softmax_cross_entropy(int64_t rows, int64_t classes, const float* logits,
                           const int32_t* labels, float grad_scale, float* grad, float* row_loss,
                           int32_t* row_correct, int32_t* bad_label, cudaStream_t s);
// The same on bf16 logits and gradient (the gradient rounded from FP32).
void softmax_cross_entropy(int64_t rows, int64_t classes, const uint16_t* logits, const int32_t* labels,
                           float grad_scale, uint16_t* grad, float* row_loss, int32_t* row_correct,
                           int32_t* bad_label, cudaStream_t s);
void causal_softmax_forward(int64_t batch, int64_t T, float scale, const float* scores,
                            float* probs, cudaStream_t s);
void causal_softmax_backward(int64_t batch, int64_t T, float scale, const float* probs,
                             const float* dprobs, float* dscores, cudaStream_t s);

void embedding_forward(int64_t batch, int64_t T, int64_t dim, int64_t vocab, const int32_t* tokens,
                       const float* wte, const float* wpe, float* y, int32_t* bad_token,
                       cudaStream_t s);
// Token-table gradient from a CSR grouping of positions by token:
// rows[k] is a token, positions[offsets[k] .. offsets[k+1]) hold it (in order).
void embedding_token_grad(int64_t n_tokens, int64_t dim, const int32_t* rows,
                          const int32_t* offsets, const int32_t* positions, const float* dy,
                          float* dwte, cudaStream_t s);
void embedding_position_grad(int64_t batch, int64_t T, int64_t dim, const float* dy, float* dwpe,
                             cudaStream_t s);

// Batch norm backward with fixed (running) statistics, one block per channel.
void batchnorm_backward_eval(int64_t n, int64_t c, int64_t hw, const float* x, const float* dy,
                             const float* gamma, const float* running_mean, const float* running_var,
                             float eps, float* dx, float* dgamma, float* dbeta, cudaStream_t s);

void sgd_step(int64_t n, float lr, float momentum, float weight_decay, bool nesterov, float* p,
              const float* grad, float* buf, cudaStream_t s);
void adam_step(int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay,
               bool decoupled, float bias_c1, float bias_c2, float* p, const float* grad, float* m,
               float* v, cudaStream_t s);
// The same updates over `count` tensors in ceil(count / 48) launches (multi_tensor.cu).
void sgd_step_multi(int64_t count, const int64_t* sizes, float* const* params, const float* const* grads,
                    float* const* bufs, float lr, float momentum, float weight_decay, bool nesterov,
                    cudaStream_t s);
void adam_step_multi(int64_t count, const int64_t* sizes, float* const* params, const float* const* grads,
                     float* const* m, float* const* v, float lr, float beta1, float beta2, float eps,
                     float weight_decay, bool decoupled, float bias_c1, float bias_c2, cudaStream_t s);
// Sums of squares of `count` tensors into sums_dev[count] (multi_tensor.cu).
// Tensor k is cut into ceil(sizes[k] / kSumSquaresChunk) chunks, whose sums
// go to partials[first_partial_host[k] + chunk]; partials_index_dev holds
// first_partial[0..count) then each tensor's chunk count.
constexpr int64_t kSumSquaresChunk = 4096;
void sum_squares_multi(int64_t count, const int64_t* sizes, const float* const* xs,
                       const int64_t* first_partial_host, const int64_t* partials_index_dev, double* partials,
                       double* sums_dev, cudaStream_t s);

}  // namespace pd::cuda::kernels
