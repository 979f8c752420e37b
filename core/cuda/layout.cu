// Layout kernels: strided copies (Transpose, Slice, Concat, Split, Pad,
// Expand of the ONNX ops) and index selection along one axis (Gather).
// Copies move bits; the selection's gradient sums in index order per
// element, so every kernel here is deterministic.
#include "core/cuda/launch.cuh"
#include "core/cuda/layout_kernels.h"

namespace pd::cuda::kernels {

namespace {

// One thread per element of the copy, its index split over the dimensions.
__global__ void strided_copy_kernel(StridedDims s, int64_t n, const float* x, float* y) {
  PD_GRID_STRIDE(i, n) {
    int64_t rest = i, xo = 0, yo = 0;
    for (int d = s.rank - 1; d >= 0; --d) {
      const int64_t c = rest % s.shape[d];
      rest /= s.shape[d];
      xo += c * s.x_stride[d];
      yo += c * s.y_stride[d];
    }
    y[yo] = x[xo];
  }
}

template <class I>
__global__ void index_select_kernel(int64_t outer, int64_t len, int64_t inner, int64_t count, const I* index,
                                    const float* x, float* y, int32_t* bad) {
  PD_GRID_STRIDE(i, outer * count * inner) {
    const int64_t e = i % inner, rest = i / inner;
    const int64_t j = rest % count, o = rest / count;
    int64_t k = static_cast<int64_t>(index[j]);
    if (k < 0) k += len;
    if (k < 0 || k >= len) {
      *bad = 1;
      y[i] = 0.0f;
    } else {
      y[i] = x[(o * len + k) * inner + e];
    }
  }
}

__global__ void index_select_grad_kernel(int64_t outer, int64_t len, int64_t inner, int64_t count, int64_t distinct,
                                         const int32_t* rows, const int32_t* offsets, const int32_t* positions,
                                         const float* dy, float* dx) {
  PD_GRID_STRIDE(i, outer * distinct * inner) {
    const int64_t e = i % inner, rest = i / inner;
    const int64_t r = rest % distinct, o = rest / distinct;
    float* target = dx + (o * len + rows[r]) * inner + e;
    float acc = *target;
    for (int32_t p = offsets[r]; p < offsets[r + 1]; ++p) acc += dy[(o * count + positions[p]) * inner + e];
    *target = acc;
  }
}

}  // namespace

void strided_copy(const StridedDims& s, const float* x, float* y, cudaStream_t stream) {
  const int64_t n = s.elements();
  if (n == 0) return;
  const int last = s.rank - 1;
  if (s.rank == 0 || (s.rank == 1 && s.x_stride[0] == 1 && s.y_stride[0] == 1)) {
    CUDA_CHECK(cudaMemcpyAsync(y, x, static_cast<size_t>(n) * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  // Rows of a slab (Concat, Split, Slice of inner dimensions): one 2-d copy.
  if (s.rank == 2 && s.x_stride[last] == 1 && s.y_stride[last] == 1 && s.x_stride[0] >= s.shape[last] &&
      s.y_stride[0] >= s.shape[last]) {
    const size_t f = sizeof(float);
    CUDA_CHECK(cudaMemcpy2DAsync(y, static_cast<size_t>(s.y_stride[0]) * f, x, static_cast<size_t>(s.x_stride[0]) * f,
                                 static_cast<size_t>(s.shape[last]) * f, static_cast<size_t>(s.shape[0]),
                                 cudaMemcpyDeviceToDevice, stream));
    return;
  }
  strided_copy_kernel<<<grid_for(n), kThreads, 0, stream>>>(s, n, x, y);
  CUDA_CHECK_LAUNCH();
}

void index_select(int64_t outer, int64_t len, int64_t inner, int64_t count, bool index_64, const void* index,
                  const float* x, float* y, int32_t* bad, cudaStream_t stream) {
  const int64_t n = outer * count * inner;
  if (n == 0) return;
  if (index_64)
    index_select_kernel<<<grid_for(n), kThreads, 0, stream>>>(outer, len, inner, count,
                                                              static_cast<const int64_t*>(index), x, y, bad);
  else
    index_select_kernel<<<grid_for(n), kThreads, 0, stream>>>(outer, len, inner, count,
                                                              static_cast<const int32_t*>(index), x, y, bad);
  CUDA_CHECK_LAUNCH();
}

void index_select_grad(int64_t outer, int64_t len, int64_t inner, int64_t count, int64_t distinct,
                       const int32_t* rows, const int32_t* offsets, const int32_t* positions, const float* dy,
                       float* dx, cudaStream_t stream) {
  const int64_t n = outer * distinct * inner;
  if (n == 0) return;
  index_select_grad_kernel<<<grid_for(n), kThreads, 0, stream>>>(outer, len, inner, count, distinct, rows, offsets,
                                                                 positions, dy, dx);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels
