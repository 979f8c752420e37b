#pragma once
// Maps with fewer pixels than the kernel has taps (VGG's 2x2 maps under a
// 3x3 kernel) waste most of an im2col GEMM on zero padding: there the
// layer is run as the dense matrix it is, Wd [O*P, C*H*W], which skips
// the padding's multiply-adds (4/9 of them for 2x2 maps with a 3x3
// kernel) and needs no im2col. Per sample NCHW is already the row layout.
//
// Called by conv2d_forward / conv2d_backward (conv_kernels.h), which add
// the bias and its gradient; uses Scratch slot 0 for Wd.
#include <cstdint>

#include "core/cpu/conv_kernels.h"

namespace pd::cpu {

// Fewer input pixels than kernel taps, and Wd of a bounded size.
bool conv_dense_is_cheaper(const ConvShape& s);
// y = conv(x, w) + bias (bias may be null).
void conv2d_dense_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y);
// dw += dL/dw when dw is not null; dx = dL/dx when dx is not null.
void conv2d_dense_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw);

}  // namespace pd::cpu
