#pragma once
// Window geometry of NCHW convolutions and pools: what every backend's
// conv and pool entries (core/device_ops.h) take. One type describes both
// the core layers' case - a square kernel, one stride, the same padding on
// every side - and what ONNX Conv, MaxPool and AveragePool allow:
// rectangular kernels, a stride per axis, a pad per side, groups (Conv),
// ceil mode and padding left out of averages (pools). Plain structs,
// includable from CUDA sources.
#include <cstdint>

namespace pd {

// Zero padding before and after each spatial axis (ONNX's pads order is
// top, left, bottom, right).
struct Pads2d {
  int64_t top = 0, left = 0, bottom = 0, right = 0;

  static constexpr Pads2d uniform(int64_t p) { return {p, p, p, p}; }
  bool is_uniform() const { return top == left && top == bottom && top == right; }
  // The same before and after on each axis: what cuDNN's descriptors take.
  bool is_symmetric() const { return top == bottom && left == right; }
  bool is_zero() const { return top == 0 && left == 0 && bottom == 0 && right == 0; }
};

// Convolution (cross-correlation) of x [batch, in_channels, in_h, in_w]
// with weight [out_channels, in_channels / groups, kernel_h, kernel_w]:
// output channel o sees the input channels of its group, o / (out_channels
// / groups). No dilation.
struct Conv2dGeometry {
  int64_t batch = 0, in_channels = 0, in_h = 0, in_w = 0;
  int64_t out_channels = 0, kernel_h = 0, kernel_w = 0;
  int64_t stride_h = 1, stride_w = 1;
  Pads2d pad;
  int64_t groups = 1;  // divides in_channels and out_channels

  // The core layers' window: kernel x kernel, `stride` on both axes,
  // `padding` on every side.
  Conv2dGeometry& square_window(int64_t kernel, int64_t stride, int64_t padding) {
    kernel_h = kernel_w = kernel;
    stride_h = stride_w = stride;
    pad = Pads2d::uniform(padding);
    return *this;
  }
  // Whether the window is such a square one (whatever the groups).
  bool has_square_window() const { return kernel_h == kernel_w && stride_h == stride_w && pad.is_uniform(); }

  int64_t out_h() const { return (in_h + pad.top + pad.bottom - kernel_h) / stride_h + 1; }
  int64_t out_w() const { return (in_w + pad.left + pad.right - kernel_w) / stride_w + 1; }
  int64_t group_in_channels() const { return in_channels / groups; }
  int64_t group_out_channels() const { return out_channels / groups; }
  // Weights per output channel: the rows of a group's im2col matrix.
  int64_t patch() const { return group_in_channels() * kernel_h * kernel_w; }
};

enum class PoolKind : uint8_t { Max, Average };

// Output size of a pooled axis as PyTorch (and ONNX) compute it: floor or,
// in ceil mode, ceiling of the window positions, where in ceil mode the last
// window must start inside the input or its leading pad.
constexpr int64_t pooled_size(int64_t size, int64_t kernel, int64_t stride, int64_t before, int64_t after,
                              bool ceil_mode) {
  const int64_t span = size + before + after - kernel;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  if (ceil_mode && (out - 1) * stride >= size + before) --out;
  return out;
}

// Pooling of x [batch, channels, in_h, in_w] plane by plane. Max pooling
// treats padding as -infinity. Average pooling divides by the window
// clipped to the padded input (count_include_pad, PyTorch's default) or
// by the input cells in the window only (count_include_pad = false);
// in ceil mode the last window may overhang the padded input, and the
// overhang never counts.
struct Pool2dGeometry {
  int64_t batch = 0, channels = 0, in_h = 0, in_w = 0;
  int64_t kernel_h = 0, kernel_w = 0, stride_h = 1, stride_w = 1;
  Pads2d pad;
  bool ceil_mode = false;
  bool count_include_pad = true;

  // The core layers' window: kernel x kernel, `stride` on both axes,
  // `padding` on every side, floor mode, padding counted in averages.
  Pool2dGeometry& square_window(int64_t kernel, int64_t stride, int64_t padding) {
    kernel_h = kernel_w = kernel;
    stride_h = stride_w = stride;
    pad = Pads2d::uniform(padding);
    ceil_mode = false;
    count_include_pad = true;
    return *this;
  }

  int64_t out_h() const { return pooled_size(in_h, kernel_h, stride_h, pad.top, pad.bottom, ceil_mode); }
  int64_t out_w() const { return pooled_size(in_w, kernel_w, stride_w, pad.left, pad.right, ceil_mode); }
};

}  // namespace pd
