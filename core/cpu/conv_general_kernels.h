#pragma once
// Every Conv2dGeometry on raw host pointers, with the contracts of the
// DeviceOps convolution entries (core/device_ops.h):
// - one group with a square window (the core layers): conv_kernels.h,
//   unchanged;
// - one group, any other window (rectangular kernels, per-axis strides,
//   per-side pads): per sample, im2col into [C*kh*kw, OH*OW] and one GEMM
//   with the weight [O, C*kh*kw]; backward by the transposed GEMMs and col2im;
// - groups: each group's channels gathered into contiguous buffers and
//   convolved as a one-group convolution of its own (either route above).
#include <cstdint>

#include "core/cpu/conv_kernels.h"

namespace pd::cpu {

// Whether g is the case conv_kernels.h takes, and its shape there.
bool conv_is_square(const Conv2dGeometry& g);
ConvShape square_conv_shape(const Conv2dGeometry& g);

// y [N, O, OH, OW] = conv(x, w) + bias [O] (bias may be null).
void conv2d_forward_general(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y);
// dx = dL/dx (overwritten).
void conv2d_backward_input_general(const Conv2dGeometry& g, const float* w, const float* dy, float* dx);
// dw += dL/dw; dbias += dL/dbias when not null.
void conv2d_backward_params_general(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                    float* dbias);

}  // namespace pd::cpu
