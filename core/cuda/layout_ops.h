#pragma once
// The CUDA entries of the layout section of DeviceOps (core/device_ops.h):
// strided copies and index selection, on the compute stream. Filled into
// the table by ops_table.cpp.
#include <cstdint>

#include "core/tensor.h"

namespace pd::cuda {

void strided_copy(int rank, const int64_t* shape, const float* x, const int64_t* x_strides, float* y,
                  const int64_t* y_strides);
bool index_select_forward(int64_t outer, int64_t len, int64_t inner, int64_t count, DType index_dtype,
                          const void* index, const float* x, float* y);
void index_select_backward_accum(int64_t outer, int64_t len, int64_t inner, int64_t count, DType index_dtype,
                                 const void* index, const float* dy, float* dx);

}  // namespace pd::cuda
