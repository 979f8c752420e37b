// The DeviceOps table of the CUDA backend: adapters from the device-neutral
// signatures of core/device_ops.h to cuBLAS, cuDNN and the own kernels, all
// on the compute stream.
#include <cmath>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/blas.h"
#include "core/cuda/check.h"
#include "core/cuda/context.h"
#include "core/cuda/dnn.h"
#include "core/cuda/kernels.h"
#include "core/device_ops.h"

namespace pd::cuda {

namespace {

cudaStream_t cs() { return context().compute; }

// A device scratch buffer from the caching allocator.
struct Scratch {
  std::shared_ptr<Storage> s;
  explicit Scratch(size_t bytes) : s(device_allocator().allocate(bytes)) {}
  template <class T> T* as() const { return static_cast<T*>(s->data); }
};

void to_host(void* dst, const void* src, size_t n) {
  cudaStream_t s = cs();
  CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
}

void synchronize() {
  Context& c = context();
  CUDA_CHECK(cudaStreamSynchronize(c.compute));
  CUDA_CHECK(cudaStreamSynchronize(c.comm));
}

uint64_t event_record() {
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreate(&e));
  CUDA_CHECK(cudaEventRecord(e, cs()));
  return reinterpret_cast<uint64_t>(e);
}

float event_elapsed_ms(uint64_t start, uint64_t end) {
  auto a = reinterpret_cast<cudaEvent_t>(start), b = reinterpret_cast<cudaEvent_t>(end);
  CUDA_CHECK(cudaEventSynchronize(b));
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

void event_release(uint64_t e) { CUDA_CHECK(cudaEventDestroy(reinterpret_cast<cudaEvent_t>(e))); }

void relu_forward(int64_t n, const float* x, float* y) { kernels::relu_forward(n, x, y, cs()); }
void relu_backward(int64_t n, const float* y, const float* dy, float* dx) { kernels::relu_backward(n, y, dy, dx, cs()); }
void add(int64_t n, const float* a, const float* b, float* y) { kernels::add(n, a, b, y, cs()); }
void scale(int64_t n, float alpha, const float* x, float* y) { kernels::scale(n, alpha, x, y, cs()); }
void axpy(int64_t n, float alpha, const float* x, float* y) { kernels::axpy(n, alpha, x, y, cs()); }
void gelu_forward(int64_t n, const float* x, float* y) { kernels::gelu_forward(n, x, y, cs()); }
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx) { kernels::gelu_backward(n, x, dy, dx, cs()); }

// Backward applies the same mask and scale to dy as forward applied to x.
void dropout_forward(int64_t n, float p, DropoutKey k, const float* x, float* y) {
  kernels::dropout(n, p, k.seed, k.layer_index, k.minibatch_id, x, y, cs());
}
void dropout_backward(int64_t n, float p, DropoutKey k, const float* dy, float* dx) {
  kernels::dropout(n, p, k.seed, k.layer_index, k.minibatch_id, dy, dx, cs());
}

void add_bias_rows(int64_t rows, int64_t cols, const float* bias, float* y) {
  kernels::add_bias_rows(rows, cols, bias, y, cs());
}
void sum_rows_accum(int64_t rows, int64_t cols, const float* x, float* out) {
  kernels::sum_rows_accum(rows, cols, x, out, cs());
}
void permute(int rank, const int64_t* x_shape, const int* perm, const float* x, float* y) {
  PD_CHECK(rank >= 1 && rank <= 6, "permute supports rank 1..6, got ", rank);
  bool seen[6] = {};
  for (int d = 0; d < rank; ++d) {
    PD_CHECK(perm[d] >= 0 && perm[d] < rank && !seen[perm[d]], "permute: perm is not a permutation of 0..", rank - 1);
    seen[perm[d]] = true;
  }
  kernels::permute(rank, x_shape, perm, x, y, cs());
}

void layernorm_forward(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* beta, float eps,
                       float* y, float* save_mean, float* save_rstd) {
  kernels::layernorm_forward(rows, dim, x, gamma, beta, eps, y, save_mean, save_rstd, cs());
}

void layernorm_backward(int64_t rows, int64_t dim, const float* x, const float* dy, const float* gamma,
                        const float* save_mean, const float* save_rstd, float* dx, float* dgamma, float* dbeta) {
  if (dx) kernels::layernorm_backward_input(rows, dim, x, dy, gamma, save_mean, save_rstd, dx, cs());
  kernels::layernorm_param_grads(rows, dim, x, dy, save_mean, save_rstd, dgamma, dbeta, cs());
}

void softmax_cross_entropy(int64_t rows, int64_t classes, const float* logits, const int32_t* labels,
                           float grad_scale, float* grad, double* loss_sum, int64_t* correct) {
  Scratch row_loss(rows * sizeof(float)), row_correct(rows * sizeof(int32_t)), bad(sizeof(int32_t));
  kernels::fill_i32(bad.as<int32_t>(), 1, 0, cs());
  kernels::softmax_cross_entropy(rows, classes, logits, labels, grad_scale, grad, row_loss.as<float>(),
                                 row_correct.as<int32_t>(), bad.as<int32_t>(), cs());
  std::vector<float> l(static_cast<size_t>(rows));
  std::vector<int32_t> ok(static_cast<size_t>(rows));
  int32_t bad_host = 0;
  to_host(&bad_host, bad.as<int32_t>(), sizeof(int32_t));
  if (bad_host) throw RuntimeFailure(cat("softmax cross-entropy: a label lies outside [0, ", classes, ")"));
  to_host(l.data(), row_loss.as<float>(), l.size() * sizeof(float));
  to_host(ok.data(), row_correct.as<int32_t>(), ok.size() * sizeof(int32_t));
  double sum = 0;
  int64_t c = 0;
  for (size_t i = 0; i < l.size(); ++i) {
    sum += l[i];
    c += ok[i];
  }
  if (loss_sum) *loss_sum = sum;
  if (correct) *correct = c;
}

void causal_softmax_forward(int64_t batch, int64_t T, float scale, const float* scores, float* probs) {
  kernels::causal_softmax_forward(batch, T, scale, scores, probs, cs());
}
void causal_softmax_backward(int64_t batch, int64_t T, float scale, const float* probs, const float* dprobs,
                             float* dscores) {
  kernels::causal_softmax_backward(batch, T, scale, probs, dprobs, dscores, cs());
}

void embedding_forward(int64_t batch, int64_t T, int64_t dim, int64_t vocab, const int32_t* tokens, const float* wte,
                       const float* wpe, float* y) {
  Scratch bad(sizeof(int32_t));
  kernels::fill_i32(bad.as<int32_t>(), 1, 0, cs());
  kernels::embedding_forward(batch, T, dim, vocab, tokens, wte, wpe, y, bad.as<int32_t>(), cs());
  int32_t bad_host = 0;
  to_host(&bad_host, bad.as<int32_t>(), sizeof(int32_t));
  if (bad_host) throw RuntimeFailure(cat("embedding: a token id lies outside [0, ", vocab, ")"));
}

// Groups positions by token on the host (a stable counting sort of B*T
// ints), then one block per distinct token sums its rows of dy in order.
void embedding_backward_accum(int64_t batch, int64_t T, int64_t dim, int64_t vocab, const int32_t* tokens,
                              const float* dy, float* dwte, float* dwpe) {
  int64_t n = batch * T;
  if (dwpe) kernels::embedding_position_grad(batch, T, dim, dy, dwpe, cs());
  if (!dwte || n == 0) return;
  std::vector<int32_t> tok(static_cast<size_t>(n));
  to_host(tok.data(), tokens, tok.size() * sizeof(int32_t));
  std::vector<int32_t> count(static_cast<size_t>(vocab) + 1, 0);
  for (int32_t t : tok) {
    if (t < 0 || t >= vocab) throw RuntimeFailure(cat("embedding: a token id lies outside [0, ", vocab, ")"));
    ++count[static_cast<size_t>(t) + 1];
  }
  std::vector<int32_t> rows, offsets{0};
  for (int64_t v = 0; v < vocab; ++v)
    if (count[v + 1]) {
      rows.push_back(static_cast<int32_t>(v));
      offsets.push_back(offsets.back() + count[v + 1]);
    }
  for (int64_t v = 0; v < vocab; ++v) count[v + 1] += count[v];  // start of each token's run
  std::vector<int32_t> positions(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) positions[count[tok[i]]++] = static_cast<int32_t>(i);
  // One pinned staging buffer (kept per thread: cudaHostAlloc is slow),
  // copied in one transfer.
  size_t k = rows.size();
  static thread_local PinnedBuffer staging;
  size_t bytes = (k + offsets.size() + positions.size()) * sizeof(int32_t);
  staging.reserve(bytes);
  int32_t* h = static_cast<int32_t*>(staging.data());
  std::copy(rows.begin(), rows.end(), h);
  std::copy(offsets.begin(), offsets.end(), h + k);
  std::copy(positions.begin(), positions.end(), h + k + offsets.size());
  Scratch d(bytes);
  CUDA_CHECK(cudaMemcpyAsync(d.as<int32_t>(), h, bytes, cudaMemcpyHostToDevice, cs()));
  kernels::embedding_token_grad(static_cast<int64_t>(k), dim, d.as<int32_t>(), d.as<int32_t>() + k,
                                d.as<int32_t>() + k + offsets.size(), dy, dwte, cs());
  // The staging buffer is reused by the next call: wait until the copy has read it.
  CUDA_CHECK(cudaStreamSynchronize(cs()));
}

void sgd_step(int64_t n, float lr, float momentum, float weight_decay, bool nesterov, float* p, const float* grad,
              float* buf) {
  PD_CHECK(momentum == 0.0f || buf, "sgd with momentum needs a momentum buffer");
  kernels::sgd_step(n, lr, momentum, weight_decay, nesterov, p, grad, buf, cs());
}

void adam_step(int64_t n, float lr, float beta1, float beta2, float eps, float weight_decay, bool decoupled,
               int64_t step_count, float* p, const float* grad, float* m, float* v) {
  PD_CHECK(step_count >= 1, "adam step count is 1-based");
  float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step_count)));
  float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step_count)));
  kernels::adam_step(n, lr, beta1, beta2, eps, weight_decay, decoupled, c1, c2, p, grad, m, v, cs());
}

DeviceOps make_table() {
  DeviceOps o;
  o.name = "cuda";
  o.synchronize = &synchronize;
  o.set_deterministic = [](bool on) { context().deterministic = on; };
  o.event_record = &event_record;
  o.event_elapsed_ms = &event_elapsed_ms;
  o.event_release = &event_release;
  o.gemm = &gemm;
  o.gemm_strided_batched = &gemm_strided_batched;
  o.conv2d_forward = &conv2d_forward;
  o.conv2d_backward_data = &conv2d_backward_data;
  o.conv2d_backward_params_accum = &conv2d_backward_params_accum;
  o.pool2d_forward = &pool2d_forward;
  o.pool2d_backward = &pool2d_backward;
  o.batchnorm_forward_train = &batchnorm_forward_train;
  o.batchnorm_forward_eval = &batchnorm_forward_eval;
  o.batchnorm_backward = &batchnorm_backward;
  o.relu_forward = &relu_forward;
  o.relu_backward = &relu_backward;
  o.add = &add;
  o.scale = &scale;
  o.axpy = &axpy;
  o.gelu_forward = &gelu_forward;
  o.gelu_backward = &gelu_backward;
  o.dropout_forward = &dropout_forward;
  o.dropout_backward = &dropout_backward;
  o.add_bias_rows = &add_bias_rows;
  o.sum_rows_accum = &sum_rows_accum;
  o.permute = &permute;
  o.layernorm_forward = &layernorm_forward;
  o.layernorm_backward = &layernorm_backward;
  o.softmax_cross_entropy = &softmax_cross_entropy;
  o.causal_softmax_forward = &causal_softmax_forward;
  o.causal_softmax_backward = &causal_softmax_backward;
  o.embedding_forward = &embedding_forward;
  o.embedding_backward_accum = &embedding_backward_accum;
  o.sgd_step = &sgd_step;
  o.adam_step = &adam_step;
  return o;
}

}  // namespace

const DeviceOps& cuda_device_ops() {
  static const DeviceOps table = make_table();
  return table;
}

}  // namespace pd::cuda
