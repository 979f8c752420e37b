#pragma once
// The unary maps of the ONNX ops (core/strided_ops.h) and softmax over one
// axis, on raw host pointers; the DeviceOps entries unary_* and
// softmax_axis_* (core/device_ops.h) document them.
#include <cstdint>

#include "core/strided_ops.h"

namespace pd::cpu {

void unary_forward(UnaryParams f, int64_t n, const float* x, float* y);
void unary_backward(UnaryParams f, int64_t n, const float* saved, const float* dy, float* dx);

void softmax_axis_forward(int64_t outer, int64_t len, int64_t inner, const float* x, float* y);
void softmax_axis_backward(int64_t outer, int64_t len, int64_t inner, const float* y, const float* dy, float* dx);

}  // namespace pd::cpu
