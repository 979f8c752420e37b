// The DeviceOps table of the CPU: adapters from the device-neutral
// signatures of core/device_ops.h to the cpu:: kernels, so that a layer
// calls one interface on every device (the CUDA twin is
// core/cuda/ops_table.cpp). Each adapter only reorders arguments or
// composes kernels; the arithmetic is the kernels', bit for bit.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <vector>

#include "core/cpu/attention_kernels.h"
#include "core/cpu/batchnorm_kernels.h"
#include "core/cpu/broadcast_kernels.h"
#include "core/cpu/conv_general_kernels.h"
#include "core/cpu/conv_kernels.h"
#include "core/cpu/cross_entropy_kernels.h"
#include "core/cpu/dropout_kernels.h"
#include "core/cpu/elementwise_kernels.h"
#include "core/cpu/embedding_kernels.h"
#include "core/cpu/gelu_kernels.h"
#include "core/cpu/gemm.h"
#include "core/cpu/layernorm_kernels.h"
#include "core/cpu/layout_kernels.h"
#include "core/cpu/linear_kernels.h"
#include "core/cpu/optimizer_kernels.h"
#include "core/cpu/pool_kernels.h"
#include "core/cpu/pool_general_kernels.h"  // every Pool2dGeometry
#include "core/cpu/residual_kernels.h"
#include "core/cpu/unary_kernels.h"
#include "core/device_ops.h"

namespace pd {

namespace {

// --- runtime: the CPU computes synchronously; events are wall-clock stamps ---
uint64_t event_record() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
          .count());
}
float event_elapsed_ms(uint64_t start, uint64_t end) { return static_cast<float>(end - start) * 1e-6f; }

void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                          int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                          float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  for (int64_t b = 0; b < batch; ++b)
    cpu::gemm(trans_a, trans_b, M, N, K, alpha, A + b * stride_a, lda, B + b * stride_b, ldb, beta,
              C + b * stride_c, ldc);
}

// --- linear ---
// The CPU computes GEMMs and convolutions in FP32 whatever the precision:
// under BF16 their operands are bf16 values and the products exact.
void linear_forward(Precision, int64_t rows, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                    float* y) {
  cpu::linear_forward(x, w, b, y, rows, in, out);
}
void linear_backward_input(Precision, int64_t rows, int64_t in, int64_t out, const float* dy, const float* w,
                           float* dx) {
  cpu::gemm(false, false, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
}
void linear_backward_params_accum(Precision, int64_t rows, int64_t in, int64_t out, const float* x, const float* dy,
                                  float* dw, float* db) {
  cpu::gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, in);
  if (db) cpu::add_column_sums(dy, rows, out, db);
}

// --- convolution: every geometry (conv_general_kernels.h routes the core
// layers' case to conv_kernels.h as it stands) ---
void conv2d_forward(Precision, const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  cpu::conv2d_forward_general(g, x, w, bias, y);
}
void conv2d_backward_data(Precision, const Conv2dGeometry& g, const float* w, const float* dy, float* dx) {
  cpu::conv2d_backward_input_general(g, w, dy, dx);
}
void conv2d_backward_params_accum(Precision, const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                  float* dbias) {
  cpu::conv2d_backward_params_general(g, x, dy, dw, dbias);
}

// --- pooling: the CPU routes max pooling's gradient through its argmax ---
void pool2d_forward_indexed(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y, int32_t* argmax) {
  cpu::pool2d_forward_general(kind, g, x, y, argmax);
}
void pool2d_backward_indexed(PoolKind kind, const Pool2dGeometry& g, const float*, const float*, const int32_t* argmax,
                             const float* dy, float* dx) {
  cpu::pool2d_backward_general(kind, g, argmax, dy, dx);
}
// The cuDNN-shaped entries: the argmax is recomputed from x.
void pool2d_forward(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y) {
  std::vector<int32_t> argmax(kind == PoolKind::Max ? static_cast<size_t>(g.batch * g.channels * g.out_h() * g.out_w())
                                                    : 0);
  pool2d_forward_indexed(kind, g, x, y, argmax.empty() ? nullptr : argmax.data());
}
void pool2d_backward(PoolKind kind, const Pool2dGeometry& g, const float* x, const float*, const float* dy, float* dx) {
  const size_t outputs = static_cast<size_t>(g.batch * g.channels * g.out_h() * g.out_w());
  std::vector<int32_t> argmax(kind == PoolKind::Max ? outputs : 0);
  if (kind == PoolKind::Max) {
    std::vector<float> y(outputs);
    cpu::pool2d_forward_general(kind, g, x, y.data(), argmax.data());
  }
  pool2d_backward_indexed(kind, g, nullptr, nullptr, argmax.empty() ? nullptr : argmax.data(), dy, dx);
}
void adaptive_avgpool2d_forward(int64_t planes, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                                const float* x, float* y) {
  cpu::adaptive_avgpool2d_forward(planes, in_h, in_w, out_h, out_w, x, y);
}
void adaptive_avgpool2d_backward(int64_t planes, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                                 const float*, const float*, const float* dy, float* dx) {
  cpu::adaptive_avgpool2d_backward(planes, in_h, in_w, out_h, out_w, dy, dx);
}

// --- batch norm ---
void batchnorm_forward_train(int64_t n, int64_t c, int64_t h, int64_t w, const float* x, const float* gamma,
                             const float* beta, float momentum, float eps, float* running_mean, float* running_var,
                             float* save_mean, float* save_invstd, float* y) {
  const cpu::BatchNormShape s{n, c, h * w};
  std::vector<float> var(static_cast<size_t>(c));
  cpu::batchnorm2d_forward_train(s, x, gamma, beta, eps, y, save_mean, var.data(), save_invstd);
  cpu::batchnorm_update_running(c, s.count(), momentum, save_mean, var.data(), running_mean, running_var);
}
void batchnorm_forward_eval(int64_t n, int64_t c, int64_t h, int64_t w, const float* x, const float* gamma,
                            const float* beta, const float* running_mean, const float* running_var, float eps,
                            float* y) {
  std::vector<float> invstd(static_cast<size_t>(c));
  cpu::batchnorm_invstd(c, running_var, eps, invstd.data());
  cpu::batchnorm2d_forward_eval({n, c, h * w}, x, gamma, beta, running_mean, invstd.data(), y);
}
void batchnorm_backward(int64_t n, int64_t c, int64_t h, int64_t w, const float* x, const float* dy,
                        const float* gamma, const float* save_mean, const float* save_invstd, float, float* dx,
                        float* dgamma, float* dbeta) {
  cpu::batchnorm2d_backward({n, c, h * w}, x, dy, save_mean, save_invstd, gamma, true, dx, dgamma, dbeta);
}
void batchnorm_backward_eval(int64_t n, int64_t c, int64_t h, int64_t w, const float* x, const float* dy,
                             const float* gamma, const float* running_mean, const float* running_var, float eps,
                             float* dx, float* dgamma, float* dbeta) {
  std::vector<float> invstd(static_cast<size_t>(c));
  cpu::batchnorm_invstd(c, running_var, eps, invstd.data());
  cpu::batchnorm2d_backward({n, c, h * w}, x, dy, running_mean, invstd.data(), gamma, false, dx, dgamma, dbeta);
}
void batchnorm_backward_input(bool training, int64_t n, int64_t c, int64_t h, int64_t w, const float* x,
                              const float* dy, const float* gamma, const float* stat_mean, const float* stat_b,
                              float eps, float* dx, float* dgamma, float* dbeta) {
  std::fill(dgamma, dgamma + c, 0.0f);
  std::fill(dbeta, dbeta + c, 0.0f);
  if (training)
    batchnorm_backward(n, c, h, w, x, dy, gamma, stat_mean, stat_b, eps, dx, dgamma, dbeta);
  else
    batchnorm_backward_eval(n, c, h, w, x, dy, gamma, stat_mean, stat_b, eps, dx, dgamma, dbeta);
}

// --- elementwise ---
void add(int64_t n, const float* a, const float* b, float* y) { cpu::residual_add(a, b, y, n); }
void scale(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = alpha * x[i];
}
void axpy(int64_t n, float alpha, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += alpha * x[i];
}
void divide(int64_t n, float d, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / d;
}
void round_bf16(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = round_to_bf16(x[i]);
}
void relu_forward_rounded(int64_t n, const float* x, float* y) {
  cpu::relu_forward(n, x, y);
  round_bf16(n, y, y);
}
void add_relu_forward_rounded(int64_t n, const float* a, const float* b, float* y) {
  cpu::add_relu_forward(n, a, b, y);
  round_bf16(n, y, y);
}
void gelu_forward(int64_t n, const float* x, float* y) { cpu::gelu_forward(x, y, n); }
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx) { cpu::gelu_backward(x, dy, dx, n); }
cpu::DropoutKey host_key(const DropoutKey& k) { return {k.seed, k.layer_index, k.minibatch_id, k.substream}; }
// Backward applies the same mask and scale to dy as forward applied to x.
void dropout_apply(int64_t n, float p, DropoutKey k, const float* x, float* y) {
  cpu::dropout_apply(host_key(k), p, x, y, n);
}
void add_bias_rows(int64_t rows, int64_t cols, const float* bias, float* y) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[r * cols + c] += bias[c];
}
void sum_rows_accum(int64_t rows, int64_t cols, const float* x, float* out) { cpu::add_column_sums(x, rows, cols, out); }
void permute(int rank, const int64_t* x_shape, const int* perm, const float* x, float* y) {
  PD_CHECK(rank >= 1 && rank <= 6, "permute supports rank 1..6, got ", rank);
  int64_t x_stride[6], y_shape[6], n = 1;
  for (int d = rank - 1; d >= 0; --d) {
    x_stride[d] = n;
    n *= x_shape[d];
  }
  for (int d = 0; d < rank; ++d) y_shape[d] = x_shape[perm[d]];
  for (int64_t i = 0; i < n; ++i) {  // i: y's flat index
    int64_t rest = i, src = 0;
    for (int d = rank - 1; d >= 0; --d) {
      src += (rest % y_shape[d]) * x_stride[perm[d]];
      rest /= y_shape[d];
    }
    y[i] = x[src];
  }
}

// --- layer norm ---
void layernorm_forward(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* beta, float eps,
                       float* y, float* save_mean, float* save_rstd) {
  cpu::layernorm_forward(x, gamma, beta, y, save_mean, save_rstd, rows, dim, eps);
}
void layernorm_backward(int64_t rows, int64_t dim, const float* x, const float* dy, const float* gamma,
                        const float* save_mean, const float* save_rstd, float* dx, float* dgamma, float* dbeta) {
  cpu::layernorm_backward(x, gamma, save_mean, save_rstd, dy, dx, dgamma, dbeta, rows, dim);
}
void layernorm_backward_input(int64_t rows, int64_t dim, const float* x, const float* dy, const float* gamma,
                              const float* save_mean, const float* save_rstd, float* dx) {
  cpu::layernorm_backward_input(x, gamma, save_mean, save_rstd, dy, dx, rows, dim);
}
void layernorm_backward_params_accum(int64_t rows, int64_t dim, const float* x, const float* dy, const float* save_mean,
                                     const float* save_rstd, float* dgamma, float* dbeta) {
  cpu::layernorm_backward_params(x, save_mean, save_rstd, dy, dgamma, dbeta, rows, dim);
}

// --- fused transformer-block pieces: the unfused sequence itself, so the bits are its bits ---
void linear_gelu_forward(Precision p, int64_t rows, int64_t in, int64_t out, const float* x, const float* w,
                         const float* b, float* pre, float* y) {
  const int64_t n = rows * out;
  if (n == 0) return;
  cpu::linear_forward(x, w, b, pre, rows, in, out);
  if (p == Precision::BF16) round_bf16(n, pre, pre);
  cpu::gelu_forward(pre, y, n);
  if (p == Precision::BF16) round_bf16(n, y, y);
}
void gelu_backward_rounded(Precision p, int64_t n, const float* pre, const float* dy, float* dx) {
  cpu::gelu_backward(pre, dy, dx, n);
  if (p == Precision::BF16) round_bf16(n, dx, dx);
}
void add_layernorm_forward(Precision p, int64_t rows, int64_t dim, const float* a, const float* r, const float* gamma,
                           const float* beta, float eps, float* s, float* y, float* save_mean, float* save_rstd) {
  const float* x = a;
  if (r) {
    cpu::residual_add(a, r, s, rows * dim);
    x = s;
  }
  cpu::layernorm_forward(x, gamma, beta, y, save_mean, save_rstd, rows, dim, eps);
  if (p == Precision::BF16) round_bf16(rows * dim, y, y);
}
void layernorm_backward_input_add(Precision p, int64_t rows, int64_t dim, const float* x, const float* dy,
                                  const float* gamma, const float* save_mean, const float* save_rstd, const float* dres,
                                  float* dx) {
  const int64_t n = rows * dim;
  if (dres && dx == dres) {  // the kernel overwrites dx: compute aside, then add
    std::vector<float> t(static_cast<size_t>(n));
    layernorm_backward_input_add(p, rows, dim, x, dy, gamma, save_mean, save_rstd, nullptr, t.data());
    cpu::residual_add(dres, t.data(), dx, n);
    return;
  }
  cpu::layernorm_backward_input(x, gamma, save_mean, save_rstd, dy, dx, rows, dim);
  if (p == Precision::BF16) round_bf16(n, dx, dx);
  if (dres) cpu::residual_add(dres, dx, dx, n);
}

// --- bf16 storage: the BF16 entries above between unpacking and packing, so the bits are theirs ---
void pack_bf16(int64_t n, const float* x, uint16_t* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_bits(x[i]);
}
void unpack_bf16(int64_t n, const uint16_t* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = bf16_value(x[i]);
}
std::vector<float> unpacked(int64_t n, const uint16_t* x) {
  std::vector<float> v(static_cast<size_t>(n));
  unpack_bf16(n, x, v.data());
  return v;
}
void linear_forward_bf16(int64_t rows, int64_t in, int64_t out, const uint16_t* x, const float* w, const float* b,
                         float* y, uint16_t* y16) {
  PD_CHECK((y == nullptr) != (y16 == nullptr), "linear_forward_bf16 writes y or y16");
  std::vector<float> y32(y16 ? static_cast<size_t>(rows * out) : 0);
  float* to = y ? y : y32.data();
  cpu::linear_forward(unpacked(rows * in, x).data(), w, b, to, rows, in, out);
  if (y) round_bf16(rows * out, y, y);
  else pack_bf16(rows * out, to, y16);
}
void linear_gelu_forward_bf16(int64_t rows, int64_t in, int64_t out, const uint16_t* x, const float* w,
                              const float* b, uint16_t* pre, uint16_t* y) {
  const int64_t n = rows * out;
  std::vector<float> pre32(static_cast<size_t>(n)), y32(static_cast<size_t>(n));
  linear_gelu_forward(Precision::BF16, rows, in, out, unpacked(rows * in, x).data(), w, b, pre32.data(), y32.data());
  pack_bf16(n, pre32.data(), pre);
  pack_bf16(n, y32.data(), y);
}
void linear_backward_input_bf16(int64_t rows, int64_t in, int64_t out, const uint16_t* dy, const float* w, float* dx,
                                uint16_t* dx16) {
  PD_CHECK((dx == nullptr) != (dx16 == nullptr), "linear_backward_input_bf16 writes dx or dx16");
  std::vector<float> dx32(dx16 ? static_cast<size_t>(rows * in) : 0);
  float* to = dx ? dx : dx32.data();
  linear_backward_input(Precision::BF16, rows, in, out, unpacked(rows * out, dy).data(), w, to);
  if (dx) round_bf16(rows * in, dx, dx);
  else pack_bf16(rows * in, to, dx16);
}
void linear_backward_params_accum_bf16(int64_t rows, int64_t in, int64_t out, const uint16_t* x, const uint16_t* dy,
                                       float* dw, float* db) {
  linear_backward_params_accum(Precision::BF16, rows, in, out, unpacked(rows * in, x).data(),
                               unpacked(rows * out, dy).data(), dw, db);
}
void gelu_backward_bf16(int64_t n, const uint16_t* pre, const uint16_t* dy, uint16_t* dx) {
  std::vector<float> dx32(static_cast<size_t>(n));
  gelu_backward_rounded(Precision::BF16, n, unpacked(n, pre).data(), unpacked(n, dy).data(), dx32.data());
  pack_bf16(n, dx32.data(), dx);
}
void add_layernorm_forward_bf16(int64_t rows, int64_t dim, const float* a, const float* r, const float* gamma,
                                const float* beta, float eps, float* s, uint16_t* y, float* save_mean,
                                float* save_rstd) {
  std::vector<float> y32(static_cast<size_t>(rows * dim));
  add_layernorm_forward(Precision::BF16, rows, dim, a, r, gamma, beta, eps, s, y32.data(), save_mean, save_rstd);
  pack_bf16(rows * dim, y32.data(), y);
}
void layernorm_backward_input_add_bf16(int64_t rows, int64_t dim, const float* x, const uint16_t* dy,
                                       const float* gamma, const float* save_mean, const float* save_rstd,
                                       const float* dres, float* dx) {
  layernorm_backward_input_add(Precision::BF16, rows, dim, x, unpacked(rows * dim, dy).data(), gamma, save_mean,
                               save_rstd, dres, dx);
}
void layernorm_backward_params_accum_bf16(int64_t rows, int64_t dim, const float* x, const uint16_t* dy,
                                          const float* save_mean, const float* save_rstd, float* dgamma,
                                          float* dbeta) {
  layernorm_backward_params_accum(rows, dim, x, unpacked(rows * dim, dy).data(), save_mean, save_rstd, dgamma, dbeta);
}

void softmax_cross_entropy_bf16(int64_t rows, int64_t classes, const uint16_t* logits, const int32_t* labels,
                                float grad_scale, uint16_t* grad, double* loss_sum, int64_t* correct) {
  const int64_t n = rows * classes;
  std::vector<float> g32(grad ? static_cast<size_t>(n) : 0);
  cpu::softmax_cross_entropy(rows, classes, unpacked(n, logits).data(), labels, grad_scale,
                             grad ? g32.data() : nullptr, loss_sum, correct);
  if (grad) pack_bf16(n, g32.data(), grad);
}

// --- attention ---
// Under BF16 attention rounds its internal GEMM operands (probabilities,
// dS); every other CPU entry is plain FP32.
cpu::AttentionShape attention_shape(Precision p, int64_t batch, int64_t T, int64_t heads, int64_t head_dim) {
  return {batch, T, heads, head_dim, p == Precision::BF16};
}
void attention_forward(Precision p, int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const float* qkv,
                       float* probs, float* att) {
  cpu::attention_forward(attention_shape(p, batch, T, heads, head_dim), qkv, probs, att);
}
void attention_backward(Precision p, int64_t batch, int64_t T, int64_t heads, int64_t head_dim, const float* qkv,
                        const float* probs, const float* datt, float* dqkv) {
  cpu::attention_backward(attention_shape(p, batch, T, heads, head_dim), qkv, probs, datt, dqkv);
}

// --- embedding ---
void check_tokens(int64_t n, int64_t vocab, const int32_t* tokens) {
  for (int64_t i = 0; i < n; ++i)
    if (tokens[i] < 0 || tokens[i] >= vocab)
      throw RuntimeFailure(cat("embedding: a token id lies outside [0, ", vocab, ")"));
}
void embedding_forward(int64_t batch, int64_t T, int64_t dim, int64_t vocab, const int32_t* tokens, const float* wte,
                       const float* wpe, float* y) {
  check_tokens(batch * T, vocab, tokens);
  cpu::embedding_forward(tokens, wte, wpe, y, batch, T, dim);
}
void embedding_backward_accum(int64_t batch, int64_t T, int64_t dim, int64_t vocab, const int32_t* tokens,
                              const float* dy, float* dwte, float* dwpe) {
  check_tokens(batch * T, vocab, tokens);
  cpu::embedding_backward(tokens, dy, dwte, dwpe, batch, T, dim);
}

// The single-tensor optimizer entries: the multi-tensor kernels on one tensor, in place.
void sgd_step(int64_t n, float lr, float momentum, float weight_decay, bool nesterov, float* p, const float* grad,
              float* buf) {
  const float* in = p;
  cpu::sgd_step_multi(1, &n, &in, &p, &grad, momentum != 0.0f ? &buf : nullptr, lr, momentum, weight_decay,
                      nesterov);
}
void adam_step(int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled,
               int64_t step_count, float* p, const float* grad, float* m, float* v) {
  const float* in = p;
  cpu::adam_step_multi(1, &n, &in, &p, &grad, &m, &v, lr, beta1, beta2, eps, weight_decay, decoupled, step_count);
}

DeviceOps make_table() {
  DeviceOps o;
  o.name = "cpu";
  o.synchronize = [] {};
  o.set_deterministic = [](bool) {};  // the CPU kernels always are
  o.event_record = &event_record;
  o.event_elapsed_ms = &event_elapsed_ms;
  o.event_release = [](uint64_t) {};
  o.gemm = &cpu::gemm;
  o.gemm_strided_batched = &gemm_strided_batched;
  o.linear_forward = &linear_forward;
  o.linear_backward_input = &linear_backward_input;
  o.linear_backward_params_accum = &linear_backward_params_accum;
  o.conv2d_forward = &conv2d_forward;
  o.conv2d_backward_data = &conv2d_backward_data;
  o.conv2d_backward_params_accum = &conv2d_backward_params_accum;
  o.pool2d_forward = &pool2d_forward;
  o.pool2d_backward = &pool2d_backward;
  o.pool_backward_reads_tensors = false;
  o.pool2d_forward_indexed = &pool2d_forward_indexed;
  o.pool2d_backward_indexed = &pool2d_backward_indexed;
  o.adaptive_avgpool2d_forward = &adaptive_avgpool2d_forward;
  o.adaptive_avgpool2d_backward = &adaptive_avgpool2d_backward;
  o.batchnorm_forward_train = &batchnorm_forward_train;
  o.batchnorm_forward_eval = &batchnorm_forward_eval;
  o.batchnorm_backward = &batchnorm_backward;
  o.batchnorm_backward_eval = &batchnorm_backward_eval;
  o.batchnorm_backward_input = &batchnorm_backward_input;
  o.relu_forward = &cpu::relu_forward;
  o.relu_backward = &cpu::relu_backward;
  o.add = &add;
  o.add_relu_forward = &cpu::add_relu_forward;
  o.scale = &scale;
  o.axpy = &axpy;
  o.round_bf16 = &round_bf16;
  o.relu_forward_rounded = &relu_forward_rounded;
  o.add_relu_forward_rounded = &add_relu_forward_rounded;
  o.gelu_forward = &gelu_forward;
  o.gelu_backward = &gelu_backward;
  o.dropout_forward = &dropout_apply;
  o.dropout_backward = &dropout_apply;
  o.add_bias_rows = &add_bias_rows;
  o.sum_rows_accum = &sum_rows_accum;
  o.permute = &permute;
  o.layernorm_forward = &layernorm_forward;
  o.layernorm_backward = &layernorm_backward;
  o.layernorm_backward_input = &layernorm_backward_input;
  o.layernorm_backward_params_accum = &layernorm_backward_params_accum;
  o.attention_forward = &attention_forward;
  o.attention_backward = &attention_backward;
  o.embedding_forward = &embedding_forward;
  o.embedding_backward_accum = &embedding_backward_accum;
  o.softmax_cross_entropy = &cpu::softmax_cross_entropy;
  o.divide = &divide;
  o.sgd_step = &sgd_step;
  o.adam_step = &adam_step;
  o.sgd_step_multi = &cpu::sgd_step_multi;
  o.adam_step_multi = &cpu::adam_step_multi;
  o.sum_squares_multi = &cpu::sum_squares_multi;
  // causal_softmax_*: null - attention runs whole (attention_forward above).
  // pointwise (strided tensors)
  o.broadcast_binary = &cpu::broadcast_binary;
  o.broadcast_binary_backward = &cpu::broadcast_binary_backward;
  o.reduce_sum_strided = &cpu::reduce_sum_strided;
  o.unary_forward = &cpu::unary_forward;
  o.unary_backward = &cpu::unary_backward;
  o.where_forward = &cpu::where_forward;
  o.where_backward = &cpu::where_backward;
  o.softmax_axis_forward = &cpu::softmax_axis_forward;
  o.softmax_axis_backward = &cpu::softmax_axis_backward;
  // (end of pointwise)
  // layout (strided tensors)
  o.strided_copy = &cpu::strided_copy;
  o.index_select_forward = &cpu::index_select_forward;
  o.index_select_backward_accum = &cpu::index_select_backward_accum;
  // (end of layout)
  o.linear_gelu_forward = &linear_gelu_forward;
  o.gelu_backward_rounded = &gelu_backward_rounded;
  o.add_layernorm_forward = &add_layernorm_forward;
  o.layernorm_backward_input_add = &layernorm_backward_input_add;
  o.pack_bf16 = &pack_bf16;
  o.unpack_bf16 = &unpack_bf16;
  o.linear_forward_bf16 = &linear_forward_bf16;
  o.linear_gelu_forward_bf16 = &linear_gelu_forward_bf16;
  o.linear_backward_input_bf16 = &linear_backward_input_bf16;
  o.linear_backward_params_accum_bf16 = &linear_backward_params_accum_bf16;
  o.gelu_backward_bf16 = &gelu_backward_bf16;
  o.add_layernorm_forward_bf16 = &add_layernorm_forward_bf16;
  o.layernorm_backward_input_add_bf16 = &layernorm_backward_input_add_bf16;
  o.layernorm_backward_params_accum_bf16 = &layernorm_backward_params_accum_bf16;
  o.softmax_cross_entropy_bf16 = &softmax_cross_entropy_bf16;
  return o;
}

}  // namespace

const DeviceOps& cpu_device_ops() {
  static const DeviceOps table = make_table();
  return table;
}

}  // namespace pd
