#pragma once
// NCHW 2-d convolution on raw host pointers: im2col + sgemm, or on
// AVX-512 hosts for the shapes where it is faster a direct convolution
// (conv_direct_kernels.h). Plain
// functions so a CUDA backend can mirror them one to one.
//
// The whole batch (or a chunk of it, to bound scratch memory) is unfolded
// into one column matrix [C*k*k, n*OH*OW], so each layer issues a few large
// GEMMs that keep every OpenBLAS thread busy, instead of one small GEMM per
// sample.
#include <cstdint>

#include "core/geometry.h"

namespace pd::cpu {

// What these kernels take: the core layers' convolutions, one group with a
// square window (kernel_h == kernel_w, one stride, the same padding on
// every side). The other Conv2dGeometry cases run in
// conv_general_kernels.h.
struct ConvShape {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride = 1, padding = 0;
  int64_t out_h() const { return (in_h + 2 * padding - kernel_h) / stride + 1; }
  int64_t out_w() const { return (in_w + 2 * padding - kernel_w) / stride + 1; }
  int64_t patch() const { return in_channels * kernel_h * kernel_w; }  // rows of an im2col matrix
};


// x [N, C, H, W] -> col [C*k*k, n*OH*OW] for samples [first, first + n):
// column j = sample (j / OH*OW), output pixel (j % OH*OW). Zero padding.
void im2col(const ConvShape& s, const float* x, int64_t first, int64_t n, float* col);
// Inverse scatter: dx[first..first+n) += col2im(col).
void col2im_add(const ConvShape& s, const float* col, int64_t first, int64_t n, float* dx);

// y [N, O, OH, OW] = conv(x, w [O, C, k, k]) + bias [O] (bias may be null).
void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y);

// Given dy [N, O, OH, OW]: dw += dL/dw, dbias += dL/dbias (when not null),
// dx = dL/dx (overwritten; skipped when dx is null).
void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx,
                     float* dw, float* dbias);
// Its two halves, which compute each output with the same code and so
// give the same bits: dx only (overwritten), and dw, dbias only (added).
void conv2d_backward_input(const ConvShape& s, const float* w, const float* dy, float* dx);
void conv2d_backward_params(const ConvShape& s, const float* x, const float* dy, float* dw, float* dbias);

// The same two without the direct kernels (conv_direct_kernels.h), which
// the entry points above take where they are faster: im2col + sgemm (or the
// dense route for maps smaller than the kernel) on every host. The direct
// kernels' reference in tests.
void conv2d_forward_im2col(const ConvShape& s, const float* x, const float* w, const float* bias, float* y);
void conv2d_backward_im2col(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx,
                            float* dw, float* dbias);

// Samples per im2col chunk, bounded so scratch stays under a fixed size.
int64_t conv_chunk_samples(const ConvShape& s);

}  // namespace pd::cpu
