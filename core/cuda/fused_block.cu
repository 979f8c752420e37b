// Fused kernels of the transformer block (their *_bf16 forms read and write
// bf16 storage where kernels.h says): bias + GELU after the fc1 GEMM,
// GELU's backward, residual add + layer norm and layer norm's backward +
// residual add. Each replaces a sequence of elementwise passes (bias,
// round, gelu, round; add, layernorm, round; layernorm backward, round,
// add) by one, with the same arithmetic per element as those passes:
// GELU as elementwise.cu, layer norm as norm_softmax.cu (same block-wide
// sums in the same tree), rounding as bf16.cu. Deterministic: no atomics.
#include <cmath>

#include "core/cuda/bf16_round.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/reduce.cuh"

namespace pd::cuda::kernels {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;

__device__ inline float gelu(float v) {
  float t = tanhf(kSqrt2OverPi * (v + kGeluC * v * v * v));
  return 0.5f * v * (1.0f + t);
}

__device__ inline float gelu_grad(float v) {
  float t = tanhf(kSqrt2OverPi * (v + kGeluC * v * v * v));
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluC * v * v);
}

// acc may alias pre (FP32, in place). T: float, or uint16_t for bf16 storage.
template <class T>
__global__ void bias_gelu_fwd_kernel(int64_t rows, int64_t cols, const float* acc, const float* bias, bool round,
                                     T* pre, T* y) {
  PD_GRID_STRIDE(i, rows * cols) {
    float v = round_bf16_if(round, acc[i] + bias[i % cols]);
    store_value(pre, i, v);
    store_value(y, i, round_bf16_if(round, gelu(v)));
  }
}

template <class T>
__global__ void gelu_bwd_rounded_kernel(int64_t n, bool round, const T* pre, const T* dy, T* dx) {
  PD_GRID_STRIDE(i, n) store_value(dx, i, round_bf16_if(round, load_value(dy, i) * gelu_grad(load_value(pre, i))));
}

// One block per row. With r, each thread writes s[i] and reads back only
// the elements it wrote itself, so no barrier is needed between them.
template <class TY>
__global__ void add_layernorm_fwd_kernel(int64_t dim, const float* a, const float* r, const float* gamma,
                                         const float* beta, float eps, bool round, float* s_out, TY* y,
                                         float* mean_out, float* rstd_out) {
  __shared__ float sh[kThreads];
  const int64_t row = blockIdx.x * dim;
  const float* xr = r ? s_out + row : a + row;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float v = a[row + i];
    if (r) {
      v = v + r[row + i];
      s_out[row + i] = v;
    }
    s += v;
  }
  float mean = block_sum(s, sh) / static_cast<float>(dim);
  float q = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float d = xr[i] - mean;
    q += d * d;
  }
  float var = block_sum(q, sh) / static_cast<float>(dim);
  float rstd = 1.0f / sqrtf(var + eps);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads)
    store_value(y, row + i, round_bf16_if(round, (xr[i] - mean) * rstd * gamma[i] + beta[i]));
  if (threadIdx.x == 0) {
    mean_out[blockIdx.x] = mean;
    rstd_out[blockIdx.x] = rstd;
  }
}

template <class TDY>
__global__ void layernorm_bwd_input_add_kernel(int64_t dim, const float* x, const TDY* dy, const float* gamma,
                                               const float* mean, const float* rstd, bool round, const float* dres,
                                               float* dx) {
  __shared__ float sh[kThreads];
  const int64_t r = blockIdx.x;
  const float* xr = x + r * dim;
  const TDY* dyr = dy + r * dim;
  float mu = mean[r], rs = rstd[r];
  float a = 0.0f, b = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float g = load_value(dyr, i) * gamma[i];
    a += g;
    b += g * (xr[i] - mu) * rs;
  }
  float sum_g = block_sum(a, sh);
  float sum_gx = block_sum(b, sh);
  float inv_d = 1.0f / static_cast<float>(dim);
  for (int64_t i = threadIdx.x; i < dim; i += kThreads) {
    float xhat = (xr[i] - mu) * rs;
    float v = round_bf16_if(round, rs * (load_value(dyr, i) * gamma[i] - sum_g * inv_d - xhat * sum_gx * inv_d));
    dx[r * dim + i] = dres ? dres[r * dim + i] + v : v;
  }
}

}  // namespace

void bias_gelu_forward(int64_t rows, int64_t cols, const float* bias, bool round, float* pre, float* y,
                       cudaStream_t s) {
  if (rows * cols == 0) return;
  bias_gelu_fwd_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, pre, bias, round, pre, y);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward_rounded(int64_t n, bool round, const float* pre, const float* dy, float* dx, cudaStream_t s) {
  if (n == 0) return;
  gelu_bwd_rounded_kernel<<<grid_for(n), kThreads, 0, s>>>(n, round, pre, dy, dx);
  CUDA_CHECK_LAUNCH();
}

void bias_gelu_forward_bf16(int64_t rows, int64_t cols, const float* acc, const float* bias, uint16_t* pre,
                            uint16_t* y, cudaStream_t s) {
  if (rows * cols == 0) return;
  bias_gelu_fwd_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, acc, bias, true, pre, y);
  CUDA_CHECK_LAUNCH();
}

void gelu_backward_bf16(int64_t n, const uint16_t* pre, const uint16_t* dy, uint16_t* dx, cudaStream_t s) {
  if (n == 0) return;
  gelu_bwd_rounded_kernel<<<grid_for(n), kThreads, 0, s>>>(n, true, pre, dy, dx);
  CUDA_CHECK_LAUNCH();
}

void add_layernorm_forward(int64_t rows, int64_t dim, const float* a, const float* r, const float* gamma,
                           const float* beta, float eps, bool round, float* s_out, float* y, float* mean,
                           float* rstd, cudaStream_t s) {
  if (rows == 0) return;
  add_layernorm_fwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dim, a, r, gamma, beta, eps, round,
                                                                            s_out, y, mean, rstd);
  CUDA_CHECK_LAUNCH();
}

void add_layernorm_forward_bf16(int64_t rows, int64_t dim, const float* a, const float* r, const float* gamma,
                                const float* beta, float eps, float* s_out, uint16_t* y, float* mean, float* rstd,
                                cudaStream_t s) {
  if (rows == 0) return;
  add_layernorm_fwd_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dim, a, r, gamma, beta, eps, true,
                                                                            s_out, y, mean, rstd);
  CUDA_CHECK_LAUNCH();
}

void layernorm_backward_input_add(int64_t rows, int64_t dim, const float* x, const float* dy, const float* gamma,
                                  const float* mean, const float* rstd, bool round, const float* dres, float* dx,
                                  cudaStream_t s) {
  if (rows == 0) return;
  layernorm_bwd_input_add_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dim, x, dy, gamma, mean, rstd,
                                                                                  round, dres, dx);
  CUDA_CHECK_LAUNCH();
}

void layernorm_backward_input_add_bf16(int64_t rows, int64_t dim, const float* x, const uint16_t* dy,
                                       const float* gamma, const float* mean, const float* rstd, const float* dres,
                                       float* dx, cudaStream_t s) {
  if (rows == 0) return;
  layernorm_bwd_input_add_kernel<<<static_cast<unsigned>(rows), kThreads, 0, s>>>(dim, x, dy, gamma, mean, rstd, true,
                                                                                  dres, dx);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels
