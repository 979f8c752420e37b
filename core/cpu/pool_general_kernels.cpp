#include "core/cpu/pool_general_kernels.h"

#include <algorithm>
#include <cmath>

#include "core/cpu/parallel.h"
#include "core/error.h"

namespace pd::cpu {

bool pool_is_square(PoolKind kind, const Pool2dGeometry& g) {
  const bool window = g.kernel_h == g.kernel_w && g.stride_h == g.stride_w && g.pad.is_uniform() && !g.ceil_mode;
  // pool_kernels.h's averages count the padding.
  return window && (kind == PoolKind::Max || g.count_include_pad || g.pad.is_zero());
}

PoolShape square_pool_shape(PoolKind kind, const Pool2dGeometry& g) {
  PD_CHECK(pool_is_square(kind, g), "not a square-window floor-mode pooling: window ", g.kernel_h, "x", g.kernel_w,
           ", strides ", g.stride_h, "x", g.stride_w);
  PoolShape s;
  s.planes = g.batch * g.channels;
  s.height = g.in_h;
  s.width = g.in_w;
  s.kernel = static_cast<int>(g.kernel_h);
  s.stride = static_cast<int>(g.stride_h);
  s.padding = static_cast<int>(g.pad.top);
  return s;
}

namespace {

// Input rows [h0, h1) and columns [w0, w1) of output (i, j), and its
// average's divisor: as PyTorch's avg_pool2d, the window clipped to the
// padded input, or only its input cells when padding is not counted.
struct Window {
  int64_t h0, h1, w0, w1, divisor;
};
Window window_of(const Pool2dGeometry& g, int64_t i, int64_t j) {
  int64_t h0 = i * g.stride_h - g.pad.top, w0 = j * g.stride_w - g.pad.left;
  int64_t h1 = std::min(h0 + g.kernel_h, g.in_h + g.pad.bottom), w1 = std::min(w0 + g.kernel_w, g.in_w + g.pad.right);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.in_h);
  w1 = std::min(w1, g.in_w);
  return {h0, h1, w0, w1, std::max<int64_t>(1, g.count_include_pad ? padded : (h1 - h0) * (w1 - w0))};
}

int64_t window_work(const Pool2dGeometry& g) { return g.out_h() * g.out_w() * g.kernel_h * g.kernel_w; }

// Pads below the kernel leave an input cell in every window (ONNX requires it).
void check_windows(const Pool2dGeometry& g) {
  const Pads2d& p = g.pad;
  PD_CHECK(p.top < g.kernel_h && p.bottom < g.kernel_h && p.left < g.kernel_w && p.right < g.kernel_w,
           "pooling pads must be below the window size ", g.kernel_h, "x", g.kernel_w);
}

}  // namespace

void pool2d_forward_general(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y, int32_t* argmax) {
  if (pool_is_square(kind, g)) {
    const PoolShape s = square_pool_shape(kind, g);
    if (kind == PoolKind::Average) return avgpool2d_forward(s, x, y);
    PD_CHECK(argmax, "CPU max pooling needs an argmax buffer");
    return maxpool2d_forward(s, x, y, argmax);
  }
  PD_CHECK(kind == PoolKind::Average || argmax, "CPU max pooling needs an argmax buffer");
  check_windows(g);
  const int64_t planes = g.batch * g.channels, H = g.in_h, W = g.in_w, OH = g.out_h(), OW = g.out_w();
  parallel_ranges(planes, planes * window_work(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* xp = x + p * H * W;
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          const int64_t o = p * OH * OW + i * OW + j;
          const Window w = window_of(g, i, j);
          if (kind == PoolKind::Max) {
            float best = -INFINITY;
            int32_t at = -1;
            for (int64_t r = w.h0; r < w.h1; ++r)
              for (int64_t c = w.w0; c < w.w1; ++c)
                if (xp[r * W + c] > best || at < 0) {
                  best = xp[r * W + c];
                  at = static_cast<int32_t>(r * W + c);
                }
            y[o] = best;
            argmax[o] = at;
          } else {
            float sum = 0;
            for (int64_t r = w.h0; r < w.h1; ++r)
              for (int64_t c = w.w0; c < w.w1; ++c) sum += xp[r * W + c];
            y[o] = sum / static_cast<float>(w.divisor);
          }
        }
    }
  });
}

void pool2d_backward_general(PoolKind kind, const Pool2dGeometry& g, const int32_t* argmax, const float* dy,
                             float* dx) {
  if (pool_is_square(kind, g)) {
    const PoolShape s = square_pool_shape(kind, g);
    if (kind == PoolKind::Average) return avgpool2d_backward(s, dy, dx);
    PD_CHECK(argmax, "CPU max pooling backward needs the forward's argmax");
    return maxpool2d_backward(s, dy, argmax, dx);
  }
  PD_CHECK(kind == PoolKind::Average || argmax, "CPU max pooling backward needs the forward's argmax");
  const int64_t planes = g.batch * g.channels, H = g.in_h, W = g.in_w, OH = g.out_h(), OW = g.out_w();
  parallel_ranges(planes, planes * window_work(g), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      float* dp = dx + p * H * W;
      std::fill(dp, dp + H * W, 0.0f);
      for (int64_t i = 0; i < OH; ++i)
        for (int64_t j = 0; j < OW; ++j) {
          const int64_t o = p * OH * OW + i * OW + j;
          if (kind == PoolKind::Max) {
            dp[argmax[o]] += dy[o];
          } else {
            const Window w = window_of(g, i, j);
            const float v = dy[o] / static_cast<float>(w.divisor);
            for (int64_t r = w.h0; r < w.h1; ++r)
              for (int64_t c = w.w0; c < w.w1; ++c) dp[r * W + c] += v;
          }
        }
    }
  });
}

}  // namespace pd::cpu
