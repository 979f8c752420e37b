// Batch norm backward with fixed statistics (eval mode), which cuDNN does
// not provide: one block per channel, fixed reduction tree (deterministic).
#include "core/cuda/kernels.h"
#include "core/cuda/reduce.cuh"

namespace pd::cuda::kernels {

namespace {

__global__ void batchnorm_backward_eval_kernel(int64_t n, int64_t channels, int64_t hw, const float* x,
                                               const float* dy, const float* gamma, const float* running_mean,
                                               const float* running_var, float eps, float* dx, float* dgamma,
                                               float* dbeta) {
  __shared__ float sh[kThreads];
  const int64_t c = blockIdx.x;
  const float mean = running_mean[c];
  const float invstd = 1.0f / sqrtf(running_var[c] + eps);
  const float scale = gamma[c] * invstd;
  const int64_t count = n * hw;
  float sum_dy = 0.0f, sum_dy_xhat = 0.0f;
  for (int64_t k = threadIdx.x; k < count; k += kThreads) {
    const int64_t i = (k / hw) * channels * hw + c * hw + k % hw;
    const float g = dy[i];
    sum_dy += g;
    sum_dy_xhat += g * (x[i] - mean) * invstd;
    if (dx) dx[i] = g * scale;
  }
  sum_dy = block_sum(sum_dy, sh);
  sum_dy_xhat = block_sum(sum_dy_xhat, sh);
  if (threadIdx.x == 0) {
    dgamma[c] += sum_dy_xhat;
    dbeta[c] += sum_dy;
  }
}

}  // namespace

void batchnorm_backward_eval(int64_t n, int64_t c, int64_t hw, const float* x, const float* dy, const float* gamma,
                             const float* running_mean, const float* running_var, float eps, float* dx,
                             float* dgamma, float* dbeta, cudaStream_t s) {
  if (c == 0) return;
  batchnorm_backward_eval_kernel<<<static_cast<unsigned>(c), kThreads, 0, s>>>(n, c, hw, x, dy, gamma, running_mean,
                                                                              running_var, eps, dx, dgamma, dbeta);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels
