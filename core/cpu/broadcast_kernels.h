#pragma once
// Broadcasting arithmetic, its gradients, strided sums and Where on raw
// host pointers, as the pointwise DeviceOps entries document them
// (core/device_ops.h): operands read through per-dimension strides (0 on
// broadcast dimensions) over an output shape of up to kMaxStridedRank
// dimensions, outputs dense. Single-threaded, walking the output in
// row-major order: a broadcast operand's gradient is summed in increasing
// output index, the order the CUDA kernels follow too.
#include <cstdint>

#include "core/strided_ops.h"

namespace pd::cpu {

void broadcast_binary(BinaryArith op, int rank, const int64_t* shape, const int64_t* a_strides,
                      const int64_t* b_strides, const float* a, const float* b, float* y);
// Mul and Div only; da, db (either may be null) overwritten.
void broadcast_binary_backward(BinaryArith op, int rank, const int64_t* shape, const int64_t* a_strides,
                               const int64_t* b_strides, const float* a, const float* b, const float* dy,
                               float* da, float* db);
void reduce_sum_strided(int rank, const int64_t* shape, const int64_t* y_strides, const float* x, float* y);
void where_forward(int rank, const int64_t* shape, const int64_t* cond_strides, const int64_t* x_strides,
                   const int64_t* y_strides, const uint8_t* cond, const float* x, const float* y, float* out);
void where_backward(int rank, const int64_t* shape, const int64_t* cond_strides, const uint8_t* cond,
                    const float* dout, float* dx, float* dy);

}  // namespace pd::cpu
