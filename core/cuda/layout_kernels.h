#pragma once
// Launchers of the layout kernels (layout.cu): strided copies and index
// selection along one axis. C++17 and free of core/tensor.h so that nvcc
// compiles them; layout_ops.cpp wraps them into the DeviceOps entries
// (core/device_ops.h, section "layout").
#include <cuda_runtime.h>

#include <cstdint>

#include "core/strided_dims.h"

namespace pd::cuda::kernels {

// y at s.y_stride = x at s.x_stride over s.shape (simplify_strided's form).
void strided_copy(const StridedDims& s, const float* x, float* y, cudaStream_t stream);

// y[o, j, :] = x[o, index[j], :] (negative: from the end); *bad set to 1
// where an index lies outside [-len, len) (y then 0 there).
void index_select(int64_t outer, int64_t len, int64_t inner, int64_t count, bool index_64, const void* index,
                  const float* x, float* y, int32_t* bad, cudaStream_t stream);

// dx[o, rows[r], :] += dy[o, positions[p], :] for p in [offsets[r], offsets[r+1]),
// in that order, one thread per element of dx's selected rows (no atomics).
void index_select_grad(int64_t outer, int64_t len, int64_t inner, int64_t count, int64_t distinct,
                       const int32_t* rows, const int32_t* offsets, const int32_t* positions, const float* dy,
                       float* dx, cudaStream_t stream);

}  // namespace pd::cuda::kernels
