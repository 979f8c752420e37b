#include "core/cpu/conv_general_kernels.h"

#include <algorithm>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/error.h"

namespace pd::cpu {

bool conv_is_square(const Conv2dGeometry& g) { return g.groups == 1 && g.has_square_window(); }

ConvShape square_conv_shape(const Conv2dGeometry& g) {
  PD_CHECK(conv_is_square(g), "not a one-group square-window convolution: kernel ", g.kernel_h, "x", g.kernel_w,
           ", groups ", g.groups);
  ConvShape s;
  s.batch = g.batch;
  s.in_channels = g.in_channels;
  s.in_h = g.in_h;
  s.in_w = g.in_w;
  s.out_channels = g.out_channels;
  s.kernel_h = g.kernel_h;
  s.kernel_w = g.kernel_w;
  s.stride = g.stride_h;
  s.padding = g.pad.top;
  return s;
}

namespace {

// --- one group, any window: per sample im2col + GEMM ---

// Row (c, i, j) of col, column (oh, ow) = x[c, oh*sh - top + i, ow*sw - left + j]
// (0 outside) for one sample x [C, H, W].
void im2col_sample(const Conv2dGeometry& g, const float* x, float* col) {
  const int64_t C = g.in_channels, H = g.in_h, W = g.in_w, OH = g.out_h(), OW = g.out_w();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < g.kernel_h; ++i)
      for (int64_t j = 0; j < g.kernel_w; ++j) {
        float* row = col + ((c * g.kernel_h + i) * g.kernel_w + j) * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t h = oh * g.stride_h - g.pad.top + i;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t v = ow * g.stride_w - g.pad.left + j;
            row[oh * OW + ow] = h >= 0 && h < H && v >= 0 && v < W ? x[(c * H + h) * W + v] : 0.0f;
          }
        }
      }
}

// dx [C, H, W] += the inverse scatter of col.
void col2im_add_sample(const Conv2dGeometry& g, const float* col, float* dx) {
  const int64_t C = g.in_channels, H = g.in_h, W = g.in_w, OH = g.out_h(), OW = g.out_w();
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < g.kernel_h; ++i)
      for (int64_t j = 0; j < g.kernel_w; ++j) {
        const float* row = col + ((c * g.kernel_h + i) * g.kernel_w + j) * OH * OW;
        for (int64_t oh = 0; oh < OH; ++oh) {
          const int64_t h = oh * g.stride_h - g.pad.top + i;
          if (h < 0 || h >= H) continue;
          for (int64_t ow = 0; ow < OW; ++ow) {
            const int64_t v = ow * g.stride_w - g.pad.left + j;
            if (v >= 0 && v < W) dx[(c * H + h) * W + v] += row[oh * OW + ow];
          }
        }
      }
}

void forward_one_group(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  if (g.has_square_window()) return conv2d_forward(square_conv_shape(g), x, w, bias, y);
  const int64_t N = g.batch, C = g.in_channels, HW = g.in_h * g.in_w, O = g.out_channels;
  const int64_t P = g.out_h() * g.out_w(), K = g.patch();
  std::vector<float> col(static_cast<size_t>(K * P));
  for (int64_t n = 0; n < N; ++n) {
    im2col_sample(g, x + n * C * HW, col.data());
    float* yn = y + n * O * P;
    if (bias)
      for (int64_t o = 0; o < O; ++o) std::fill(yn + o * P, yn + (o + 1) * P, bias[o]);
    gemm(false, false, O, P, K, 1.0f, w, K, col.data(), P, bias ? 1.0f : 0.0f, yn, P);
  }
}

void backward_input_one_group(const Conv2dGeometry& g, const float* w, const float* dy, float* dx) {
  if (g.has_square_window()) return conv2d_backward_input(square_conv_shape(g), w, dy, dx);
  const int64_t N = g.batch, C = g.in_channels, HW = g.in_h * g.in_w, O = g.out_channels;
  const int64_t P = g.out_h() * g.out_w(), K = g.patch();
  std::fill(dx, dx + N * C * HW, 0.0f);
  std::vector<float> col(static_cast<size_t>(K * P));
  for (int64_t n = 0; n < N; ++n) {
    gemm(true, false, K, P, O, 1.0f, w, K, dy + n * O * P, P, 0.0f, col.data(), P);  // dcol = W^T dy
    col2im_add_sample(g, col.data(), dx + n * C * HW);
  }
}

void backward_params_one_group(const Conv2dGeometry& g, const float* x, const float* dy, float* dw, float* dbias) {
  if (g.has_square_window()) return conv2d_backward_params(square_conv_shape(g), x, dy, dw, dbias);
  const int64_t N = g.batch, C = g.in_channels, HW = g.in_h * g.in_w, O = g.out_channels;
  const int64_t P = g.out_h() * g.out_w(), K = g.patch();
  std::vector<float> col(static_cast<size_t>(K * P));
  for (int64_t n = 0; n < N; ++n) {
    const float* dyn = dy + n * O * P;
    im2col_sample(g, x + n * C * HW, col.data());
    gemm(false, true, O, K, P, 1.0f, dyn, P, col.data(), P, 1.0f, dw, K);  // dW += dy col^T
    if (dbias)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t p = 0; p < P; ++p) dbias[o] += dyn[o * P + p];
  }
}

// --- groups: each group's channels as a contiguous tensor ---

// Channels [first, first + count) of an NCHW tensor with `channels`
// channels of `plane` cells, copied out into [N, count, plane] / back in.
void gather_channels(const float* src, int64_t n, int64_t channels, int64_t plane, int64_t first, int64_t count,
                     float* dst) {
  for (int64_t i = 0; i < n; ++i)
    std::copy(src + (i * channels + first) * plane, src + (i * channels + first + count) * plane,
              dst + i * count * plane);
}
void scatter_channels(const float* src, int64_t n, int64_t channels, int64_t plane, int64_t first, int64_t count,
                      float* dst) {
  for (int64_t i = 0; i < n; ++i)
    std::copy(src + i * count * plane, src + (i + 1) * count * plane, dst + (i * channels + first) * plane);
}

// One group's convolution: g with its channel counts divided by the groups.
Conv2dGeometry group_geometry(const Conv2dGeometry& g) {
  PD_CHECK(g.groups >= 1 && g.in_channels % g.groups == 0 && g.out_channels % g.groups == 0, "groups ", g.groups,
           " do not divide the channels (", g.in_channels, " in, ", g.out_channels, " out)");
  Conv2dGeometry s = g;
  s.in_channels = g.group_in_channels();
  s.out_channels = g.group_out_channels();
  s.groups = 1;
  return s;
}

// Sizes of one group's slices: input and output planes, weights.
struct GroupSlices {
  int64_t in_plane, out_plane, x, y, w;
  explicit GroupSlices(const Conv2dGeometry& s)
      : in_plane(s.in_h * s.in_w),
        out_plane(s.out_h() * s.out_w()),
        x(s.batch * s.in_channels * in_plane),
        y(s.batch * s.out_channels * out_plane),
        w(s.out_channels * s.patch()) {}
};

}  // namespace

void conv2d_forward_general(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y) {
  if (g.groups == 1) return forward_one_group(g, x, w, bias, y);
  const Conv2dGeometry s = group_geometry(g);
  const GroupSlices z(s);
  std::vector<float> xg(static_cast<size_t>(z.x)), yg(static_cast<size_t>(z.y));
  for (int64_t k = 0; k < g.groups; ++k) {
    gather_channels(x, g.batch, g.in_channels, z.in_plane, k * s.in_channels, s.in_channels, xg.data());
    forward_one_group(s, xg.data(), w + k * z.w, bias ? bias + k * s.out_channels : nullptr, yg.data());
    scatter_channels(yg.data(), g.batch, g.out_channels, z.out_plane, k * s.out_channels, s.out_channels, y);
  }
}

void conv2d_backward_input_general(const Conv2dGeometry& g, const float* w, const float* dy, float* dx) {
  if (g.groups == 1) return backward_input_one_group(g, w, dy, dx);
  const Conv2dGeometry s = group_geometry(g);
  const GroupSlices z(s);
  std::vector<float> dyg(static_cast<size_t>(z.y)), dxg(static_cast<size_t>(z.x));
  for (int64_t k = 0; k < g.groups; ++k) {
    gather_channels(dy, g.batch, g.out_channels, z.out_plane, k * s.out_channels, s.out_channels, dyg.data());
    backward_input_one_group(s, w + k * z.w, dyg.data(), dxg.data());
    scatter_channels(dxg.data(), g.batch, g.in_channels, z.in_plane, k * s.in_channels, s.in_channels, dx);
  }
}

void conv2d_backward_params_general(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                    float* dbias) {
  if (g.groups == 1) return backward_params_one_group(g, x, dy, dw, dbias);
  const Conv2dGeometry s = group_geometry(g);
  const GroupSlices z(s);
  std::vector<float> xg(static_cast<size_t>(z.x)), dyg(static_cast<size_t>(z.y));
  for (int64_t k = 0; k < g.groups; ++k) {
    gather_channels(x, g.batch, g.in_channels, z.in_plane, k * s.in_channels, s.in_channels, xg.data());
    gather_channels(dy, g.batch, g.out_channels, z.out_plane, k * s.out_channels, s.out_channels, dyg.data());
    backward_params_one_group(s, xg.data(), dyg.data(), dw + k * z.w, dbias ? dbias + k * s.out_channels : nullptr);
  }
}

}  // namespace pd::cpu
