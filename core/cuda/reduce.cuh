#pragma once
// Block-wide reductions in a fixed tree order (deterministic). Every thread
// of the block must call them; blockDim.x must be kThreads.
#include "core/cuda/launch.cuh"

namespace pd::cuda::kernels {

__device__ inline float block_sum(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

__device__ inline float block_max(float v, float* sh) {
  sh[threadIdx.x] = v;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) sh[threadIdx.x] = fmaxf(sh[threadIdx.x], sh[threadIdx.x + s]);
    __syncthreads();
  }
  float r = sh[0];
  __syncthreads();
  return r;
}

// Index of the largest value; ties go to the smallest index (like a CPU scan).
__device__ inline int64_t block_argmax(float v, int64_t idx, float* shv, int64_t* shi) {
  shv[threadIdx.x] = v;
  shi[threadIdx.x] = idx;
  __syncthreads();
  for (int s = kThreads / 2; s > 0; s >>= 1) {
    if (threadIdx.x < s) {
      float ov = shv[threadIdx.x + s];
      int64_t oi = shi[threadIdx.x + s];
      if (ov > shv[threadIdx.x] || (ov == shv[threadIdx.x] && oi < shi[threadIdx.x])) {
        shv[threadIdx.x] = ov;
        shi[threadIdx.x] = oi;
      }
    }
    __syncthreads();
  }
  int64_t r = shi[0];
  __syncthreads();
  return r;
}

}  // namespace pd::cuda::kernels
