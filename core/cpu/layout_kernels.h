#pragma once
// Layout kernels of the strided-tensor entries (core/device_ops.h, section
// "layout"): strided copies and index selection along one axis. Copies
// move bits, so any split across threads gives the same result; the index
// selection's backward adds in index order on one thread per element.
#include <cstdint>

#include "core/tensor.h"

namespace pd::cpu {

// DeviceOps::strided_copy. Runs of elements contiguous in x and y become
// memcpy calls; dimensions that are contiguous in both merge first.
void strided_copy(int rank, const int64_t* shape, const float* x, const int64_t* x_strides, float* y,
                  const int64_t* y_strides);

// DeviceOps::index_select_forward / index_select_backward_accum (host index).
bool index_select_forward(int64_t outer, int64_t len, int64_t inner, int64_t count, DType index_dtype,
                          const void* index, const float* x, float* y);
void index_select_backward_accum(int64_t outer, int64_t len, int64_t inner, int64_t count, DType index_dtype,
                                 const void* index, const float* dy, float* dx);

}  // namespace pd::cpu
