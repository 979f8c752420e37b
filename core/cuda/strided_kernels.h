#pragma once
// Launchers of the pointwise kernels on strided tensors (strided.cu,
// unary.cu): what the DeviceOps entries broadcast_binary*,
// reduce_sum_strided, where_*, unary_* and softmax_axis_* run on CUDA
// (core/device_ops.h documents each). Shapes and strides are host arrays
// of `rank` <= kMaxRank values. C++17, free of core/tensor.h (nvcc).
#include <cuda_runtime.h>

#include <cstdint>

#include "core/strided_ops.h"

namespace pd::cuda::kernels {

constexpr int kMaxRank = 8;  // DeviceOps' kMaxStridedRank (static_assert in ops_table.cpp)

void broadcast_binary(BinaryArith op, int rank, const int64_t* shape, const int64_t* a_strides,
                      const int64_t* b_strides, const float* a, const float* b, float* y, cudaStream_t s);
// Mul and Div; each gradient element one thread summing its terms in
// increasing output index (no atomics).
void broadcast_binary_backward(BinaryArith op, int rank, const int64_t* shape, const int64_t* a_strides,
                               const int64_t* b_strides, const float* a, const float* b, const float* dy,
                               float* da, float* db, cudaStream_t s);
void reduce_sum_strided(int rank, const int64_t* shape, const int64_t* y_strides, const float* x, float* y,
                        cudaStream_t s);
void where_forward(int rank, const int64_t* shape, const int64_t* cond_strides, const int64_t* x_strides,
                   const int64_t* y_strides, const uint8_t* cond, const float* x, const float* y, float* out,
                   cudaStream_t s);
void where_backward(int rank, const int64_t* shape, const int64_t* cond_strides, const uint8_t* cond,
                    const float* dout, float* dx, float* dy, cudaStream_t s);

void unary_forward(UnaryParams f, int64_t n, const float* x, float* y, cudaStream_t s);
void unary_backward(UnaryParams f, int64_t n, const float* saved, const float* dy, float* dx, cudaStream_t s);
// One thread per (outer, inner) row, the CPU's loops (sums in double).
void softmax_axis_forward(int64_t outer, int64_t len, int64_t inner, const float* x, float* y, cudaStream_t s);
void softmax_axis_backward(int64_t outer, int64_t len, int64_t inner, const float* y, const float* dy, float* dx,
                           cudaStream_t s);

}  // namespace pd::cuda::kernels
