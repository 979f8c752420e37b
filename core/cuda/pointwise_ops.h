#pragma once
// The pointwise entries of CUDA's DeviceOps table (core/device_ops.h,
// section "pointwise"): broadcasting arithmetic, strided sums, Where,
// unary maps and softmax on one axis, queued on the compute stream.
#include "core/device_ops.h"

namespace pd::cuda {

void fill_pointwise_ops(DeviceOps& o);

}  // namespace pd::cuda
