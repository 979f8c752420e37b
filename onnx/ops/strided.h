#pragma once
// Strided copies for the layout ops (Transpose, Slice, Concat, Split, Pad,
// Expand) and the segment's boundary packing: DeviceOps::strided_copy on
// the tensors' device.
#include <cstdint>
#include <vector>

#include "core/device_ops.h"
#include "core/tensor.h"

namespace pd::onnx {

// y (+ y_offset) at y_strides = x (+ x_offset) at x_strides over `shape`, on x's device.
inline void copy_strided(const Shape& shape, const Tensor& x, int64_t x_offset, const std::vector<int64_t>& x_strides,
                         Tensor& y, int64_t y_offset, const std::vector<int64_t>& y_strides) {
  PD_CHECK(static_cast<int>(shape.size()) <= kMaxStridedRank, "a layout op on a rank-", shape.size(),
           " tensor (at most ", kMaxStridedRank, ")");
  PD_CHECK(x.device() == y.device(), "strided copy between ", x.device().str(), " and ", y.device().str());
  device_ops(x.device())
      .strided_copy(static_cast<int>(shape.size()), shape.data(), x.f32() + x_offset, x_strides.data(),
                    y.f32() + y_offset, y_strides.data());
}

}  // namespace pd::onnx
