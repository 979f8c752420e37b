// The DeviceOps table of the CUDA backend: adapters from the device-neutral
// signatures of core/device_ops.h to cuBLAS, cuDNN and the own kernels, all
// on the compute stream.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cuda/allocator.h"
#include "core/cuda/backend.h"
#include "core/cuda/blas.h"
#include "core/cuda/check.h"
#include "core/cuda/column_sum.h"
#include "core/cuda/context.h"
#include "core/cuda/dnn.h"
#include "core/cuda/fused_attention.h"
#include "core/cuda/kernels.h"
#include "core/cuda/layout_ops.h"
#include "core/cuda/pointwise_ops.h"
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

// The data loader's copies run on a stream of their own so that the next
// minibatch's inputs travel while the compute stream trains on this one.
cudaStream_t copy_stream() {
  static cudaStream_t s = [] {
    cudaStream_t made = nullptr;
    context();  // binds this thread to the process's device
    CUDA_CHECK(cudaStreamCreateWithFlags(&made, cudaStreamNonBlocking));
    return made;
  }();
  context();
  return s;
}

void* pinned_alloc(size_t bytes) {
  context();
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  return p;
}

void pinned_free(void* p) {
  if (p) CUDA_CHECK(cudaFreeHost(p));
}

uint64_t upload_async(void* dst, const void* src, size_t n) {
  cudaStream_t copy = copy_stream();
  stream_wait(copy, cs());  // dst may come from a block the compute stream's earlier work used
  CUDA_CHECK(cudaMemcpyAsync(dst, src, n, cudaMemcpyHostToDevice, copy));
  cudaEvent_t e;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(e, copy));
  return reinterpret_cast<uint64_t>(e);
}

void upload_wait_on_compute(uint64_t e) {
  CUDA_CHECK(cudaStreamWaitEvent(cs(), reinterpret_cast<cudaEvent_t>(e), 0));
}

void upload_release(uint64_t e) {
  auto ev = reinterpret_cast<cudaEvent_t>(e);
  CUDA_CHECK(cudaEventSynchronize(ev));
  CUDA_CHECK(cudaEventDestroy(ev));
}

void relu_forward(int64_t n, const float* x, float* y) { kernels::relu_forward(n, x, y, false, cs()); }
void relu_backward(int64_t n, const float* y, const float* dy, float* dx) { kernels::relu_backward(n, y, dy, dx, cs()); }
void add(int64_t n, const float* a, const float* b, float* y) { kernels::add(n, a, b, y, cs()); }
void scale(int64_t n, float alpha, const float* x, float* y) { kernels::scale(n, alpha, x, y, cs()); }
void axpy(int64_t n, float alpha, const float* x, float* y) { kernels::axpy(n, alpha, x, y, cs()); }
void round_bf16(int64_t n, const float* x, float* y) { kernels::round_bf16(n, x, y, cs()); }
void divide(int64_t n, float d, const float* x, float* y) { kernels::divide(n, d, x, y, cs()); }
void gelu_forward(int64_t n, const float* x, float* y) { kernels::gelu_forward(n, x, y, cs()); }
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx) { kernels::gelu_backward(n, x, dy, dx, cs()); }

// Backward applies the same mask and scale to dy as forward applied to x.
void dropout_forward(int64_t n, float p, DropoutKey k, const float* x, float* y) {
  PD_CHECK(n / 4 < (int64_t{1} << 32), "dropout over ", n, " elements exceeds the mask counter");
  kernels::dropout(n, p, k.seed, k.layer_index, k.minibatch_id, k.substream, x, y, cs());
}
void dropout_backward(int64_t n, float p, DropoutKey k, const float* dy, float* dx) {
  kernels::dropout(n, p, k.seed, k.layer_index, k.minibatch_id, k.substream, dy, dx, cs());
}

void add_bias_rows(int64_t rows, int64_t cols, const float* bias, float* y) {
  kernels::add_bias_rows(rows, cols, bias, y, cs());
}
// Workspace of the two-stage column sums (column_sum.h).
Scratch column_workspace(int64_t rows, int64_t cols, int outputs) {
  const int64_t n = kernels::column_sum_workspace_floats(rows, cols, outputs);
  return Scratch(static_cast<size_t>(n > 0 ? n : 1) * sizeof(float));
}
void sum_rows_accum(int64_t rows, int64_t cols, const float* x, float* out) {
  Scratch w = column_workspace(rows, cols, 1);
  kernels::sum_rows_accum(rows, cols, x, out, w.as<float>(), cs());
}
void layernorm_param_grads(int64_t rows, int64_t dim, const float* x, const float* dy, const float* mean,
                           const float* rstd, float* dgamma, float* dbeta) {
  Scratch w = column_workspace(rows, dim, 2);
  kernels::layernorm_param_grads(rows, dim, x, dy, mean, rstd, dgamma, dbeta, w.as<float>(), cs());
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
  layernorm_param_grads(rows, dim, x, dy, save_mean, save_rstd, dgamma, dbeta);
}

// The loss on FP32 or bf16 logits (T: float or uint16_t); the rows' losses
// and correct counts are summed on the host, in row order.
template <class T>
void cross_entropy(int64_t rows, int64_t classes, const T* logits, const int32_t* labels, float grad_scale, T* grad,
                   double* loss_sum, int64_t* correct) {
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

void batchnorm_backward_eval(int64_t n, int64_t c, int64_t h, int64_t w, const float* x, const float* dy,
                             const float* gamma, const float* running_mean, const float* running_var, float eps,
                             float* dx, float* dgamma, float* dbeta) {
  kernels::batchnorm_backward_eval(n, c, h * w, x, dy, gamma, running_mean, running_var, eps, dx, dgamma, dbeta,
                                   cs());
}

// --- composed entries: the layers' one interface, from the kernels above ---

void linear_forward(Precision p, int64_t rows, int64_t in, int64_t out, const float* x, const float* w, const float* b,
                    float* y) {
  gemm(p, false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, y, out);
  if (b) kernels::add_bias_rows(rows, out, b, y, cs());
}
void linear_backward_input(Precision p, int64_t rows, int64_t in, int64_t out, const float* dy, const float* w,
                           float* dx) {
  gemm(p, false, false, rows, in, out, 1.0f, dy, out, w, in, 0.0f, dx, in);
}
void linear_backward_params_accum(Precision p, int64_t rows, int64_t in, int64_t out, const float* x, const float* dy,
                                  float* dw, float* db) {
  gemm(p, true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, in);
  if (db) sum_rows_accum(rows, out, dy, db);
}

// Fused transformer-block pieces: the GEMM, then one pass that adds the
// bias, applies GELU and rounds (under BF16) where linear_forward,
// round_bf16, gelu_forward and round_bf16 made four.
void linear_gelu_forward(Precision p, int64_t rows, int64_t in, int64_t out, const float* x, const float* w,
                         const float* b, float* pre, float* y) {
  if (rows * out == 0) return;
  PD_CHECK(b != nullptr, "linear_gelu_forward needs a bias");
  gemm(p, false, true, rows, out, in, 1.0f, x, in, w, in, 0.0f, pre, out);
  kernels::bias_gelu_forward(rows, out, b, p == Precision::BF16, pre, y, cs());
}
void gelu_backward_rounded(Precision p, int64_t n, const float* pre, const float* dy, float* dx) {
  kernels::gelu_backward_rounded(n, p == Precision::BF16, pre, dy, dx, cs());
}
void add_layernorm_forward(Precision p, int64_t rows, int64_t dim, const float* a, const float* r, const float* gamma,
                           const float* beta, float eps, float* s, float* y, float* save_mean, float* save_rstd) {
  kernels::add_layernorm_forward(rows, dim, a, r, gamma, beta, eps, p == Precision::BF16, s, y, save_mean, save_rstd,
                                 cs());
}
void layernorm_backward_input_add(Precision p, int64_t rows, int64_t dim, const float* x, const float* dy,
                                  const float* gamma, const float* save_mean, const float* save_rstd, const float* dres,
                                  float* dx) {
  kernels::layernorm_backward_input_add(rows, dim, x, dy, gamma, save_mean, save_rstd, p == Precision::BF16, dres, dx,
                                        cs());
}

// bf16 storage: GEMMs read the bf16 activations as they are (the weights
// packed per call) and write FP32 only where a pass after them needs it.
void pack_bf16(int64_t n, const float* x, uint16_t* y) { kernels::pack_bf16(n, x, y, cs()); }
void unpack_bf16(int64_t n, const uint16_t* x, float* y) { kernels::unpack_bf16(n, x, y, cs()); }
void linear_forward_bf16(int64_t rows, int64_t in, int64_t out, const uint16_t* x, const float* w, const float* b,
                         float* y, uint16_t* y16) {
  PD_CHECK((y == nullptr) != (y16 == nullptr), "linear_forward_bf16 writes y or y16");
  if (rows * out == 0) return;
  Bf16Copy w16(w, out * in);
  if (y) {
    gemm_bf16(false, true, rows, out, in, 1.0f, x, in, w16.get(), in, 0.0f, y, false, out);
    kernels::bias_round(rows, out, b, y, cs());
    return;
  }
  if (!b) {  // cuBLAS rounds its FP32 sums into bf16 itself (a head's logits: no FP32 copy of them)
    gemm_bf16(false, true, rows, out, in, 1.0f, x, in, w16.get(), in, 0.0f, y16, true, out);
    return;
  }
  Scratch acc(static_cast<size_t>(rows * out) * sizeof(float));
  gemm_bf16(false, true, rows, out, in, 1.0f, x, in, w16.get(), in, 0.0f, acc.as<float>(), false, out);
  kernels::bias_pack_bf16(rows, out, acc.as<float>(), b, y16, cs());
}
void linear_gelu_forward_bf16(int64_t rows, int64_t in, int64_t out, const uint16_t* x, const float* w,
                              const float* b, uint16_t* pre, uint16_t* y) {
  if (rows * out == 0) return;
  PD_CHECK(b != nullptr, "linear_gelu_forward_bf16 needs a bias");
  Bf16Copy w16(w, out * in);
  Scratch acc(static_cast<size_t>(rows * out) * sizeof(float));
  gemm_bf16(false, true, rows, out, in, 1.0f, x, in, w16.get(), in, 0.0f, acc.as<float>(), false, out);
  kernels::bias_gelu_forward_bf16(rows, out, acc.as<float>(), b, pre, y, cs());
}
void linear_backward_input_bf16(int64_t rows, int64_t in, int64_t out, const uint16_t* dy, const float* w, float* dx,
                                uint16_t* dx16) {
  PD_CHECK((dx == nullptr) != (dx16 == nullptr), "linear_backward_input_bf16 writes dx or dx16");
  if (rows * in == 0) return;
  Bf16Copy w16(w, out * in);
  if (dx16) {
    gemm_bf16(false, false, rows, in, out, 1.0f, dy, out, w16.get(), in, 0.0f, dx16, true, in);
    return;
  }
  gemm_bf16(false, false, rows, in, out, 1.0f, dy, out, w16.get(), in, 0.0f, dx, false, in);
  kernels::bias_round(rows, in, nullptr, dx, cs());
}
void linear_backward_params_accum_bf16(int64_t rows, int64_t in, int64_t out, const uint16_t* x, const uint16_t* dy,
                                       float* dw, float* db) {
  gemm_bf16(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, false, in);
  if (db) {
    Scratch ws = column_workspace(rows, out, 1);
    kernels::sum_rows_accum_bf16(rows, out, dy, db, ws.as<float>(), cs());
  }
}
void gelu_backward_bf16(int64_t n, const uint16_t* pre, const uint16_t* dy, uint16_t* dx) {
  kernels::gelu_backward_bf16(n, pre, dy, dx, cs());
}
void add_layernorm_forward_bf16(int64_t rows, int64_t dim, const float* a, const float* r, const float* gamma,
                                const float* beta, float eps, float* s, uint16_t* y, float* save_mean,
                                float* save_rstd) {
  kernels::add_layernorm_forward_bf16(rows, dim, a, r, gamma, beta, eps, s, y, save_mean, save_rstd, cs());
}
void layernorm_backward_input_add_bf16(int64_t rows, int64_t dim, const float* x, const uint16_t* dy,
                                       const float* gamma, const float* save_mean, const float* save_rstd,
                                       const float* dres, float* dx) {
  kernels::layernorm_backward_input_add_bf16(rows, dim, x, dy, gamma, save_mean, save_rstd, dres, dx, cs());
}
void layernorm_backward_params_accum_bf16(int64_t rows, int64_t dim, const float* x, const uint16_t* dy,
                                          const float* save_mean, const float* save_rstd, float* dgamma,
                                          float* dbeta) {
  Scratch ws = column_workspace(rows, dim, 2);
  kernels::layernorm_param_grads_bf16(rows, dim, x, dy, save_mean, save_rstd, dgamma, dbeta, ws.as<float>(), cs());
}

// cuDNN pooling reads x and y in backward; it keeps no argmax.
void pool2d_forward_indexed(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y, int32_t*) {
  pool2d_forward(kind, g, x, y);
}
void pool2d_backward_indexed(PoolKind kind, const Pool2dGeometry& g, const float* x, const float* y, const int32_t*,
                             const float* dy, float* dx) {
  pool2d_backward(kind, g, x, y, dy, dx);
}

// An average pool with kernel = stride = in / out: what the adaptive pool
// computes when the output size divides the input.
Pool2dGeometry adaptive_geometry(int64_t planes, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w) {
  if (in_h % out_h != 0 || in_w % out_w != 0)
    throw UserError(cat("adaptive_avgpool2d(", out_h, "x", out_w, ") on a GPU: the output size must divide the input ",
                        in_h, "x", in_w, " (uneven adaptive windows run on the CPU only)"));
  Pool2dGeometry g;
  g.batch = planes;
  g.channels = 1;
  g.in_h = in_h;
  g.in_w = in_w;
  g.kernel_h = g.stride_h = in_h / out_h;
  g.kernel_w = g.stride_w = in_w / out_w;
  return g;
}
void adaptive_avgpool2d_forward(int64_t planes, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                                const float* x, float* y) {
  pool2d_forward(PoolKind::Average, adaptive_geometry(planes, in_h, in_w, out_h, out_w), x, y);
}
void adaptive_avgpool2d_backward(int64_t planes, int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                                 const float* x, const float* y, const float* dy, float* dx) {
  pool2d_backward(PoolKind::Average, adaptive_geometry(planes, in_h, in_w, out_h, out_w), x, y, dy, dx);
}

// The parameter sums into zeroed outputs; cuDNN always writes dx, so
// without a caller for it into scratch.
void batchnorm_backward_input(bool training, int64_t n, int64_t c, int64_t h, int64_t w, const float* x,
                              const float* dy, const float* gamma, const float* stat_mean, const float* stat_b,
                              float eps, float* dx, float* dgamma, float* dbeta) {
  CUDA_CHECK(cudaMemsetAsync(dgamma, 0, static_cast<size_t>(c) * sizeof(float), cs()));
  CUDA_CHECK(cudaMemsetAsync(dbeta, 0, static_cast<size_t>(c) * sizeof(float), cs()));
  if (!training) {
    kernels::batchnorm_backward_eval(n, c, h * w, x, dy, gamma, stat_mean, stat_b, eps, dx, dgamma, dbeta, cs());
    return;
  }
  if (dx) return batchnorm_backward(n, c, h, w, x, dy, gamma, stat_mean, stat_b, eps, dx, dgamma, dbeta);
  Scratch scratch(static_cast<size_t>(n * c * h * w) * sizeof(float));
  batchnorm_backward(n, c, h, w, x, dy, gamma, stat_mean, stat_b, eps, scratch.as<float>(), dgamma, dbeta);
}

void add_relu_forward(int64_t n, const float* a, const float* b, float* y) {
  kernels::add_relu_forward(n, a, b, y, false, cs());
}
void add_relu_forward_rounded(int64_t n, const float* a, const float* b, float* y) {
  kernels::add_relu_forward(n, a, b, y, true, cs());
}
void relu_forward_rounded(int64_t n, const float* x, float* y) { kernels::relu_forward(n, x, y, true, cs()); }

void layernorm_backward_input(int64_t rows, int64_t dim, const float* x, const float* dy, const float* gamma,
                              const float* save_mean, const float* save_rstd, float* dx) {
  kernels::layernorm_backward_input(rows, dim, x, dy, gamma, save_mean, save_rstd, dx, cs());
}
void layernorm_backward_params_accum(int64_t rows, int64_t dim, const float* x, const float* dy, const float* save_mean,
                                     const float* save_rstd, float* dgamma, float* dbeta) {
  layernorm_param_grads(rows, dim, x, dy, save_mean, save_rstd, dgamma, dbeta);
}

// Attention on the GPU: qkv [B, T, 3, H, hd] is permuted to heads-major
// [3, B, H, T, hd], so that q, k and v of every (batch, head) are
// contiguous [T, hd] matrices for strided-batched GEMMs.
float softmax_scale(int64_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

void qkv_to_heads(int64_t B, int64_t T, int64_t H, int64_t hd, const float* qkv, float* heads) {
  const int64_t qkv_shape[5] = {B, T, 3, H, hd};
  const int to_heads[5] = {2, 0, 3, 1, 4};
  permute(5, qkv_shape, to_heads, qkv, heads);
}

void attention_forward(Precision p, int64_t B, int64_t T, int64_t H, int64_t hd, const float* qkv, float* probs,
                       float* att) {
  const int64_t BH = B * H, mat = T * hd, part = BH * mat;
  Scratch heads(static_cast<size_t>(3 * part) * sizeof(float)), out_heads(static_cast<size_t>(part) * sizeof(float));
  qkv_to_heads(B, T, H, hd, qkv, heads.as<float>());
  const float* q = heads.as<float>();
  const float* k = q + part;
  const float* v = k + part;
  gemm_strided_batched(p, false, true, T, T, hd, 1.0f, q, hd, mat, k, hd, mat, 0.0f, probs, T, T * T, BH);
  kernels::causal_softmax_forward(BH, T, softmax_scale(hd), probs, probs, cs());
  // bf16: P is an operand (of PV here, of dV and the softmax backward later),
  // rounded where the CPU rounds it; dS is rounded by the GEMMs' packing.
  if (p == Precision::BF16) kernels::round_bf16(BH * T * T, probs, probs, cs());
  gemm_strided_batched(p, false, false, T, hd, T, 1.0f, probs, T, T * T, v, hd, mat, 0.0f, out_heads.as<float>(), hd,
                       mat, BH);
  const int64_t heads_shape[4] = {B, H, T, hd};
  const int swap_ht[4] = {0, 2, 1, 3};
  permute(4, heads_shape, swap_ht, out_heads.as<float>(), att);
}

void attention_backward(Precision p, int64_t B, int64_t T, int64_t H, int64_t hd, const float* qkv, const float* probs,
                        const float* datt, float* dqkv) {
  const int64_t BH = B * H, mat = T * hd, part = BH * mat;
  Scratch heads(static_cast<size_t>(3 * part) * sizeof(float)), dheads(static_cast<size_t>(3 * part) * sizeof(float));
  Scratch dout_heads(static_cast<size_t>(part) * sizeof(float)), dscores(static_cast<size_t>(BH * T * T) * sizeof(float));
  qkv_to_heads(B, T, H, hd, qkv, heads.as<float>());
  const int64_t att_shape[4] = {B, T, H, hd};
  const int swap_th[4] = {0, 2, 1, 3};
  permute(4, att_shape, swap_th, datt, dout_heads.as<float>());
  const float* q = heads.as<float>();
  const float* k = q + part;
  const float* v = k + part;
  float* dq = dheads.as<float>();
  float* dk = dq + part;
  float* dv = dk + part;
  float* ds = dscores.as<float>();
  // dv = probsᵀ dout; dprobs = dout vᵀ, turned into dscores in place.
  gemm_strided_batched(p, true, false, T, hd, T, 1.0f, probs, T, T * T, dout_heads.as<float>(), hd, mat, 0.0f, dv, hd,
                       mat, BH);
  gemm_strided_batched(p, false, true, T, T, hd, 1.0f, dout_heads.as<float>(), hd, mat, v, hd, mat, 0.0f, ds, T, T * T,
                       BH);
  kernels::causal_softmax_backward(BH, T, softmax_scale(hd), probs, ds, ds, cs());
  // dq = dscores k; dk = dscoresᵀ q.
  gemm_strided_batched(p, false, false, T, hd, T, 1.0f, ds, T, T * T, k, hd, mat, 0.0f, dq, hd, mat, BH);
  gemm_strided_batched(p, true, false, T, hd, T, 1.0f, ds, T, T * T, q, hd, mat, 0.0f, dk, hd, mat, BH);
  const int64_t dheads_shape[5] = {3, B, H, T, hd};
  const int to_rows[5] = {1, 3, 0, 2, 4};
  permute(5, dheads_shape, to_rows, dheads.as<float>(), dqkv);
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

// An out-of-place step copies the old weights into the new version first
// (on the compute stream, so in order), then updates that in place: one
// more pass over the weights, cheap next to the GPU's memory bandwidth.
void copy_into_out(int64_t count, const int64_t* sizes, const float* const* params_in, float* const* params_out) {
  for (int64_t i = 0; i < count; ++i)
    if (params_out[i] != params_in[i] && sizes[i] > 0)
      CUDA_CHECK(cudaMemcpyAsync(params_out[i], params_in[i], static_cast<size_t>(sizes[i]) * sizeof(float),
                                 cudaMemcpyDeviceToDevice, cs()));
}

void sgd_step_multi(int64_t count, const int64_t* sizes, const float* const* params_in, float* const* params_out,
                    const float* const* grads, float* const* bufs, float lr, float momentum, float weight_decay,
                    bool nesterov) {
  PD_CHECK(momentum == 0.0f || bufs, "sgd with momentum needs momentum buffers");
  copy_into_out(count, sizes, params_in, params_out);
  kernels::sgd_step_multi(count, sizes, params_out, grads, bufs, lr, momentum, weight_decay, nesterov, cs());
}

void adam_step_multi(int64_t count, const int64_t* sizes, const float* const* params_in, float* const* params_out,
                     const float* const* grads, float* const* m, float* const* v, float lr, float beta1, float beta2,
                     float eps, float weight_decay, bool decoupled, int64_t step_count) {
  PD_CHECK(step_count >= 1, "adam step count is 1-based");
  float c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(step_count)));
  float c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(step_count)));
  copy_into_out(count, sizes, params_in, params_out);
  kernels::adam_step_multi(count, sizes, params_out, grads, m, v, lr, beta1, beta2, eps, weight_decay, decoupled, c1,
                           c2, cs());
}

void sum_squares_multi(int64_t count, const int64_t* sizes, const float* const* xs, double* sums) {
  if (count == 0) return;
  // index: where each tensor's chunk sums start, then how many it has.
  std::vector<int64_t> index(static_cast<size_t>(2 * count));
  int64_t partials = 0;
  for (int64_t k = 0; k < count; ++k) {
    const int64_t chunks = (sizes[k] + kernels::kSumSquaresChunk - 1) / kernels::kSumSquaresChunk;
    index[static_cast<size_t>(k)] = partials;
    index[static_cast<size_t>(count + k)] = chunks;
    partials += chunks;
  }
  Scratch index_dev(index.size() * sizeof(int64_t));
  Scratch work(static_cast<size_t>(std::max<int64_t>(partials, 1) + count) * sizeof(double));
  CUDA_CHECK(cudaMemcpyAsync(index_dev.as<int64_t>(), index.data(), index.size() * sizeof(int64_t),
                             cudaMemcpyHostToDevice, cs()));
  double* sums_dev = work.as<double>() + std::max<int64_t>(partials, 1);
  kernels::sum_squares_multi(count, sizes, xs, index.data(), index_dev.as<int64_t>(), work.as<double>(), sums_dev,
                             cs());
  to_host(sums, sums_dev, static_cast<size_t>(count) * sizeof(double));
}

DeviceOps make_table() {
  DeviceOps o;
  o.name = "cuda";
  o.synchronize = &synchronize;
  o.set_deterministic = [](bool on) { context().deterministic = on; };
  o.event_record = &event_record;
  o.event_elapsed_ms = &event_elapsed_ms;
  o.event_release = &event_release;
  o.pinned_alloc = &pinned_alloc;
  o.pinned_free = &pinned_free;
  o.upload_async = &upload_async;
  o.upload_wait_on_compute = &upload_wait_on_compute;
  o.upload_release = &upload_release;
  // The table's GEMMs compute in FP32, cpu::gemm's contract: callers with
  // bf16 operands go through the linear, convolution and attention
  // entries, which take the precision.
  o.gemm = [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
    gemm(Precision::FP32, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  };
  o.gemm_strided_batched = [](bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                              int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                              float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
    gemm_strided_batched(Precision::FP32, ta, tb, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc,
                         stride_c, batch);
  };
  o.linear_forward = &linear_forward;
  o.linear_backward_input = &linear_backward_input;
  o.linear_backward_params_accum = &linear_backward_params_accum;
  o.conv2d_forward = &conv2d_forward;
  o.conv2d_backward_data = &conv2d_backward_data;
  o.conv2d_backward_params_accum = &conv2d_backward_params_accum;
  o.pool2d_forward = &pool2d_forward;
  o.pool2d_backward = &pool2d_backward;
  o.pool_backward_reads_tensors = true;
  o.pool2d_forward_indexed = &pool2d_forward_indexed;
  o.pool2d_backward_indexed = &pool2d_backward_indexed;
  o.adaptive_avgpool2d_forward = &adaptive_avgpool2d_forward;
  o.adaptive_avgpool2d_backward = &adaptive_avgpool2d_backward;
  o.batchnorm_forward_train = &batchnorm_forward_train;
  o.batchnorm_forward_eval = &batchnorm_forward_eval;
  o.batchnorm_backward = &batchnorm_backward;
  o.batchnorm_backward_eval = &batchnorm_backward_eval;
  o.batchnorm_backward_input = &batchnorm_backward_input;
  o.relu_forward = &relu_forward;
  o.relu_backward = &relu_backward;
  o.add = &add;
  o.add_relu_forward = &add_relu_forward;
  o.scale = &scale;
  o.axpy = &axpy;
  o.round_bf16 = &round_bf16;
  o.relu_forward_rounded = &relu_forward_rounded;
  o.add_relu_forward_rounded = &add_relu_forward_rounded;
  o.divide = &divide;
  o.sgd_step_multi = &sgd_step_multi;
  o.adam_step_multi = &adam_step_multi;
  o.sum_squares_multi = &sum_squares_multi;
  o.gelu_forward = &gelu_forward;
  o.gelu_backward = &gelu_backward;
  o.dropout_forward = &dropout_forward;
  o.dropout_backward = &dropout_backward;
  o.add_bias_rows = &add_bias_rows;
  o.sum_rows_accum = &sum_rows_accum;
  o.permute = &permute;
  o.layernorm_forward = &layernorm_forward;
  o.layernorm_backward = &layernorm_backward;
  o.layernorm_backward_input = &layernorm_backward_input;
  o.layernorm_backward_params_accum = &layernorm_backward_params_accum;
  o.linear_gelu_forward = &linear_gelu_forward;
  o.gelu_backward_rounded = &gelu_backward_rounded;
  o.add_layernorm_forward = &add_layernorm_forward;
  o.layernorm_backward_input_add = &layernorm_backward_input_add;
  o.bf16_storage_pays = true;
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
  o.softmax_cross_entropy_bf16 = &cross_entropy<uint16_t>;
  o.attention_forward = &attention_forward;
  o.attention_backward = &attention_backward;
  o.fused_attention_supported = &fused_attention_supported;
  o.fused_attention_forward = &fused_attention_forward;
  o.fused_attention_backward = &fused_attention_backward;
  o.fused_attention_forward_bf16 = &fused_attention_forward_bf16;
  o.fused_attention_backward_bf16 = &fused_attention_backward_bf16;
  o.softmax_cross_entropy = &cross_entropy<float>;
  o.causal_softmax_forward = &causal_softmax_forward;
  o.causal_softmax_backward = &causal_softmax_backward;
  o.embedding_forward = &embedding_forward;
  o.embedding_backward_accum = &embedding_backward_accum;
  o.sgd_step = &sgd_step;
  o.adam_step = &adam_step;
  // pointwise (strided tensors)
  fill_pointwise_ops(o);
  // (end of pointwise)
  // layout (strided tensors)
  o.strided_copy = &cuda::strided_copy;
  o.index_select_forward = &cuda::index_select_forward;
  o.index_select_backward_accum = &cuda::index_select_backward_accum;
  // (end of layout)
  return o;
}

}  // namespace

const DeviceOps& cuda_device_ops() {
  static const DeviceOps table = make_table();
  return table;
}

}  // namespace pd::cuda
