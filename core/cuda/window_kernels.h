#pragma once
// Launchers of window.cu: what cuDNN does not cover for convolutions and
// pools (dnn.cpp decides when). C++17, free of core/tensor.h, so that nvcc
// compiles it. Planes are the batch * channels [H, W] maps of NCHW tensors.
#include <cuda_runtime.h>

#include <cstdint>

namespace pd::cuda::kernels {

// y [planes, H + top + bottom, W + left + right] = x [planes, H, W] with zeros around it.
void pad_planes(int64_t planes, int64_t H, int64_t W, int64_t top, int64_t left, int64_t bottom, int64_t right,
                const float* x, float* y, cudaStream_t s);
// x [planes, H, W] = the interior of y [planes, H + top + bottom, W + left + right].
void crop_planes(int64_t planes, int64_t H, int64_t W, int64_t top, int64_t left, int64_t bottom, int64_t right,
                 const float* y, float* x, cudaStream_t s);

// A pooling window as core/geometry.h's Pool2dGeometry describes it, with
// the output size computed on the host.
struct PoolWindow {
  int64_t planes, H, W, OH, OW;
  int64_t kernel_h, kernel_w, stride_h, stride_w;
  int64_t top, left, bottom, right;
  bool count_include_pad;
};

// Max pooling as cpu::pool2d_forward_general: y (may be null) the maximum
// of each window, argmax (may be null) its in-plane index, the first in
// row-major window order on ties.
void pool_max_forward(const PoolWindow& p, const float* x, float* y, int32_t* argmax, cudaStream_t s);
// Average pooling: the window's sum in row-major order over its divisor.
void pool_avg_forward(const PoolWindow& p, const float* x, float* y, cudaStream_t s);
// dx (overwritten): each input cell sums dy over the windows that hold it
// (max: whose argmax it is), in output order - no atomics, the CPU's order.
void pool_max_backward(const PoolWindow& p, const int32_t* argmax, const float* dy, float* dx, cudaStream_t s);
void pool_avg_backward(const PoolWindow& p, const float* dy, float* dx, cudaStream_t s);

}  // namespace pd::cuda::kernels
