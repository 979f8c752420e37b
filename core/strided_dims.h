#pragma once
// The dimensions of a strided copy (DeviceOps::strided_copy) in their
// simplest form, for both backends' kernels: size-1 dimensions dropped and
// neighbours that are contiguous in both x and y merged, so that a slab
// copy becomes [outer, run] and a contiguous copy one run. Header only and
// free of core/tensor.h, so that nvcc compiles it.
#include <cstdint>

namespace pd {

struct StridedDims {
  static constexpr int kMaxRank = 8;  // kMaxStridedRank (core/device_ops.h)
  int rank = 0;                       // after merging; 0 with elements() == 1: one element
  int64_t shape[kMaxRank] = {};
  int64_t x_stride[kMaxRank] = {};
  int64_t y_stride[kMaxRank] = {};
  bool empty = false;                 // some dimension has size 0

  int64_t elements() const {
    if (empty) return 0;
    int64_t n = 1;
    for (int d = 0; d < rank; ++d) n *= shape[d];
    return n;
  }
  // Elements in the dimensions before the last (the runs' count).
  int64_t outer() const {
    int64_t n = 1;
    for (int d = 0; d + 1 < rank; ++d) n *= shape[d];
    return n;
  }
};

// Assumes rank <= StridedDims::kMaxRank (callers check).
inline StridedDims simplify_strided(int rank, const int64_t* shape, const int64_t* xs, const int64_t* ys) {
  StridedDims s;
  for (int d = 0; d < rank; ++d) {
    if (shape[d] == 0) s.empty = true;
    if (shape[d] == 1) continue;
    const int r = s.rank;
    // Merge into the previous (outer) kept dimension when this one continues it in both tensors.
    if (r > 0 && s.x_stride[r - 1] == xs[d] * shape[d] && s.y_stride[r - 1] == ys[d] * shape[d]) {
      s.shape[r - 1] *= shape[d];
      s.x_stride[r - 1] = xs[d];
      s.y_stride[r - 1] = ys[d];
      continue;
    }
    s.shape[r] = shape[d];
    s.x_stride[r] = xs[d];
    s.y_stride[r] = ys[d];
    ++s.rank;
  }
  return s;
}

}  // namespace pd
