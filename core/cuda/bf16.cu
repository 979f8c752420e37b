// bfloat16 kernels for --precision bf16: rounding in place (the layers'
// rounding points) and the exact float -> bf16 packing of operands that are
// already bf16 values, for tensor-core GEMMs and convolutions.
#include <cuda_bf16.h>

#include "core/cuda/bf16_round.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"

namespace pd::cuda::kernels {

namespace {

__global__ void round_bf16_kernel(int64_t n, const float* x, float* y) {
  PD_GRID_STRIDE(i, n) y[i] = round_bf16_rne(x[i]);
}

// Rounds (exact for bf16 values) and keeps the upper half of the bits.
__global__ void pack_bf16_kernel(int64_t n, const float* x, uint16_t* y) {
  PD_GRID_STRIDE(i, n) y[i] = static_cast<uint16_t>(__float_as_uint(round_bf16_rne(x[i])) >> 16);
}

// y = round(y + bias[col]) (no bias: round only).
__global__ void bias_round_kernel(int64_t rows, int64_t cols, const float* bias, float* y) {
  PD_GRID_STRIDE(i, rows * cols) y[i] = round_bf16_rne(bias ? y[i] + bias[i % cols] : y[i]);
}

__global__ void bias_pack_kernel(int64_t rows, int64_t cols, const float* acc, const float* bias, uint16_t* y) {
  PD_GRID_STRIDE(i, rows * cols) {
    const float v = round_bf16_rne(bias ? acc[i] + bias[i % cols] : acc[i]);
    y[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
  }
}

__global__ void unpack_bf16_kernel(int64_t n, const uint16_t* x, float* y) {
  PD_GRID_STRIDE(i, n) y[i] = __uint_as_float(static_cast<uint32_t>(x[i]) << 16);
}

}  // namespace

void round_bf16(int64_t n, const float* x, float* y, cudaStream_t s) {
  if (n <= 0) return;
  round_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x, y);
  CUDA_CHECK_LAUNCH();
}

void pack_bf16(int64_t n, const float* x, uint16_t* y, cudaStream_t s) {
  if (n <= 0) return;
  pack_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x, y);
  CUDA_CHECK_LAUNCH();
}

void bias_round(int64_t rows, int64_t cols, const float* bias, float* y, cudaStream_t s) {
  if (rows * cols <= 0) return;
  bias_round_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, bias, y);
  CUDA_CHECK_LAUNCH();
}

void bias_pack_bf16(int64_t rows, int64_t cols, const float* acc, const float* bias, uint16_t* y16, cudaStream_t s) {
  if (rows * cols <= 0) return;
  bias_pack_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, acc, bias, y16);
  CUDA_CHECK_LAUNCH();
}

void unpack_bf16(int64_t n, const uint16_t* x, float* y, cudaStream_t s) {
  if (n <= 0) return;
  unpack_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels
