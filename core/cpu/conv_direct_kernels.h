#pragma once
// Direct (implicit-GEMM) convolution for AVX-512 hosts: no im2col matrix.
//
// Each sample's zero-padded input is laid out once as stride x stride
// phase planes per channel (the plain padded image for stride 1), with
// rows as wide as the output plus the kernel's reach. Every kernel tap
// (c, ky, kx) is then one constant offset into that "grid", the same for
// every output pixel, so the forward pass is a sum over taps of shifted
// contiguous rows times a broadcast weight, and the weight gradient is a
// dot product of dy's rows with the same shifted rows. Outputs are
// computed on the grid's width (a few extra columns per row, discarded).
//
// OpenBLAS on im2col loses most on few output channels (ResNet's stem and
// 64-channel stage): its packing of the column matrix dominates there.
//
// Per output the arithmetic is fixed by the shape alone: results do not
// depend on the thread count (threads take whole samples; the weight
// gradient adds per-sample sums in sample order).
#include "core/cpu/conv_kernels.h"

namespace pd::cpu {

// The host runs AVX-512 (checked once, at run time: the build targets AVX2).
bool conv_direct_available();
// Whether conv2d_forward / conv2d_backward_params take the direct kernels
// for this shape (available, and measured faster than im2col + sgemm).
bool conv_direct_forward_chosen(const ConvShape& s);
bool conv_direct_params_chosen(const ConvShape& s);

// Any shape, when available. y = conv(x, w) + bias (bias may be null).
void conv2d_direct_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y);
// dw += dL/dw.
void conv2d_direct_backward_params(const ConvShape& s, const float* x, const float* dy, float* dw);

}  // namespace pd::cpu
