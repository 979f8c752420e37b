// Row-wise kernels, one block per row: layer norm, softmax cross-entropy,
// causal softmax for attention. Layer norm's parameter gradients are column
// sums (column_sum.cu).
#include <cfloat>
#include <cmath>

#include "core/cuda/bf16_round.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/reduce.cuh"

namespace pd::cuda::kernels {

namespace {

__global__ void layernorm_fwd_kernel(int64_t dim, const float* x, const float* gamma, const float* beta,
                                     float eps, float* y, float* mean_out, float* rstd_out) {
  __shared__ float sh[kThreads];
  const float* xr = x + blockIdx.x * dim;
  float* yr = y + blockIdx.x * dim;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) s += xr[i];
  float mean = block_sum(s, sh) / static_cast<float>(dim);
  float q = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float d = xr[i] - mean;
    q += d * d;
  }
  float var = block_sum(q, sh) / static_cast<float>(dim);
  float rstd = 1.0f / sqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) yr[i] = (xr[i] - mean) * rstd * gamma[i] + beta[i];
  if (threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

__global__ void layernorm_bwd_input_kernel(int64_t dim, const float* x, const float* dy, const float* gamma,
                                           const float* mean, const float* rstd, float* dx) {
  __shared__ float sh[kThreads];
  int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  const float* dyr = dy + r * dim;
  float mu = mean[r], rs = rstd[r];
  float a = 0.0f, b = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float g = dyr[i] * gamma[i];
    a += g;
    b += g * (xr[i] - mu) * rs;
  }
  float sum_g = block_sum(a, sh);
  float sum_gx = block_sum(b, sh);
  float inv_d = 1.0f / static_cast<float>(dim);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float xhat = (xr[i] - mu) * rs;
    dx[r * dim + i] = rs * (dyr[i] * gamma[i] - sum_g * inv_d - xhat * sum_gx * inv_d);
  }
}

// T: float, or uint16_t for bf16 logits and gradient (a bf16 store rounds).
template <class T>
__global__ void softmax_xent_kernel(int64_t classes, const T* logits, const int32_t* labels, float grad_scale,
                                    T* grad, float* row_loss, int32_t* row_correct, int32_t* bad_label) {
  __shared__ float shv[kThreads];
  __shared__ int64_t shi[kThreads];
  int64_t r = blockIdx.x;
  const T* x = logits + r * classes;
  float m = -FLT_MAX;
  int64_t arg = 0;
  bool first = true;
  for (int64_t i = threadIdx.x; i < classes; i += kThreads)
    if (first || load_value(x, i) > m) {
      m = load_value(x, i);
      arg = i;
      first = false;
    }
  if (first) arg = classes;  // this thread saw nothing
  int64_t amax = block_argmax(first ? -FLT_MAX : m, arg, shv, shi);
  float mx = load_value(x, amax < classes ? amax : 0);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < classes; i += kThreads) s += expf(load_value(x, i) - mx);
  float sum = block_sum(s, shv);
  int32_t label = labels[r];
  bool ok = label >= 0 && label < classes;
  if (threadIdx.x == 0) {
    if (!ok) *bad_label = 1;
    row_loss[r] = ok ? logf(sum) - (load_value(x, label) - mx) : 0.0f;
    row_correct[r] = ok && amax == label ? 1 : 0;
  }
  if (grad) {
    __syncthreads();  // every read of x above precedes any write: grad may alias logits
    float inv = 1.0f / sum;
    for (int64_t i = threadIdx.x; i < classes; i += kThreads) {
      float p = expf(load_value(x, i) - mx) * inv;
      store_value(grad, r * classes + i, (p - (i == label ? 1.0f : 0.0f)) * grad_scale);
    }
  }
}

__global__ void causal_softmax_fwd_kernel(int64_t T, float scale, const float* scores, float* probs) {
  __shared__ float sh[kThreads];
  int64_t row = blockIdx.x;
  int64_t t = row % T;  // query position: keys 0..t are visible
  const float* s = scores + row * T;
  float* p = probs + row * T;
  float m = -FLT_MAX;
  for (int64_t j = threadIdx.x; j <= t; j += kThreads) m = fmaxf(m, scale * s[j]);
  float mx = block_max(m, sh);
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += kThreads) acc += expf(scale * s[j] - mx);
  float inv = 1.0f / block_sum(acc, sh);
  // Reading s[j] before writing p[j] in the same thread keeps aliasing safe.
  for (int64_t j = threadIdx.x; j < T; j += kThreads) p[j] = j <= t ? expf(scale * s[j] - mx) * inv : 0.0f;
}

__global__ void causal_softmax_bwd_kernel(int64_t T, float scale, const float* probs, const float* dprobs,
                                          float* dscores) {
  __shared__ float sh[kThreads];
  int64_t row = blockIdx.x;
  int64_t t = row % T;
  const float* p = probs + row * T;
  const float* dp = dprobs + row * T;
  float* ds = dscores + row * T;
  float acc = 0.0f;
  for (int64_t j = threadIdx.x; j <= t; j += kThreads) acc += dp[j] * p[j];
  float dot = block_sum(acc, sh);
  for (int64_t j = threadIdx.x; j < T; j += kThreads) ds[j] = j <= t ? scale * p[j] * (dp[j] - dot) : 0.0f;
}

}  // namespace

void layernorm_forward(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* beta,
                       float eps, float* y, float* mean, float* rstd, cudaStream_t s) {
  if (rows == 0) return;
  layernorm_fwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dim, x, gamma, beta, eps, y, mean, rstd);
  CUDA_CHECK_LAUNCH();
}

void layernorm_backward_input(int64_t rows, int64_t dim, const float* x, const float* dy, const float* gamma,
                              const float* mean, const float* rstd, float* dx, cudaStream_t s) {
  if (rows == 0) return;
  layernorm_bwd_input_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dim, x, dy, gamma, mean, rstd, dx);
  CUDA_CHECK_LAUNCH();
}

void softmax_cross_entropy(int64_t rows, int64_t classes, const float* logits, const int32_t* labels,
                           float grad_scale, float* grad, float* row_loss, int32_t* row_correct,
                           int32_t* bad_label, cudaStream_t s) {
  if (rows == 0) return;
  softmax_xent_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(classes, logits, labels, grad_scale, grad,
                                                                      row_loss, row_correct, bad_label);
  CUDA_CHECK_LAUNCH();
}

void softmax_cross_entropy(int64_t rows, int64_t classes, const uint16_t* logits, const int32_t* labels,
                           float grad_scale, uint16_t* grad, float* row_loss, int32_t* row_correct,
                           int32_t* bad_label, cudaStream_t s) {
  if (rows == 0) return;
  softmax_xent_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(classes, logits, labels, grad_scale, grad,
                                                                      row_loss, row_correct, bad_label);
  CUDA_CHECK_LAUNCH();
}

void causal_softmax_forward(int64_t batch, int64_t T, float scale, const float* scores, float* probs,
                            cudaStream_t s) {
  if (batch * T == 0) return;
  causal_softmax_fwd_kernel<<<static_cast<unsigned>(batch * T), kThreads, 0, s>>>(T, scale, scores, probs);
  CUDA_CHECK_LAUNCH();
}

void causal_softmax_backward(int64_t batch, int64_t T, float scale, const float* probs, const float* dprobs,
                             float* dscores, cudaStream_t s) {
  if (batch * T == 0) return;
  causal_softmax_bwd_kernel<<<static_cast<unsigned>(batch * T), kThreads, 0, s>>>(T, scale, probs, dprobs,
                                                                                 dscores);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels
