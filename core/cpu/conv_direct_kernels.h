#pragma once
// Direct (implicit-GEMM) convolution for AVX-512 hosts: no im2col matrix.
//
// OpenBLAS on im2col loses most where the GEMM has few rows (output
// channels: ResNet's stem and 64-channel stage), as packing and streaming
// the column matrix dominates there, and on every small map.
//
// Each sample's zero-padded input is laid out once as stride x stride
// phase planes per channel (the plain padded image for stride 1), rows as
// wide as the output plus the kernel's reach: the "grid". Every kernel tap
// (c, ky, kx) is then one constant offset into it, the same for every
// output pixel. Three register-tiled kernels read it:
//  - forward: 16-32-48-64 output channels (weights as aligned vectors) x up
//    to 24 pixels of an output row (broadcast scalars), summing the taps;
//  - 3x3 stride-1 weight gradient: 32 output channels (dy transposed to
//    [pixel][channel]) x one input channel's 9 taps (broadcast), summing
//    over pixels;
//  - other weight gradients: 4 output channels x 6 taps, vectors along
//    pixels, lanes summed at the end.
// The input gradient of a stride-1 convolution is the forward kernel on the
// flipped kernel (conv_kernels.cpp).
//
// Every output's sum runs in an order fixed by the shape alone: results do
// not depend on the thread count (threads split output blocks or input
// channels, never a sum).
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
