#include "core/cpu/pool_kernels.h"

#include "core/cpu/fast_math.h"
#include "core/cpu/parallel.h"
#include <algorithm>
#include <cstring>
#include <limits>

namespace pd::cpu {

// One 2x2 window, candidates in window order; NaN propagates, as in
// PyTorch: once best is NaN nothing beats it.
static inline void max_of_window(const float* r0, const float* r1, int64_t where, int64_t W, float* out,
                                 int32_t* arg) {
  float best = r0[0];
  const float cand[3] = {r0[1], r1[0], r1[1]};
  const int64_t pos[3] = {where + 1, where + W, where + W + 1};
  for (int q = 0; q < 3; ++q)
    if (cand[q] > best || (cand[q] != cand[q] && best == best)) {
      best = cand[q];
      where = pos[q];
    }
  *out = best;
  *arg = static_cast<int32_t>(where);
}

// The common 2x2 stride-2 unpadded case, without window bookkeeping:
// 8 windows of a row pair at a time (the same comparisons, lane by lane),
// then the rest one by one.
static void maxpool2x2_plane(const float* in, int64_t W, int64_t OH, int64_t OW, float* out, int32_t* arg) {
  const i32x8 even{0, 2, 4, 6, 8, 10, 12, 14}, odd = even + 1;
  const i32x8 lane{0, 2, 4, 6, 8, 10, 12, 14};  // input column offset of each window
  const i32x8 one = {1, 1, 1, 1, 1, 1, 1, 1}, zero = {};
  for (int64_t oh = 0; oh < OH; ++oh) {
    const float* r0 = in + 2 * oh * W;
    const float* r1 = r0 + W;
    int64_t ow = 0;
    for (; ow + 8 <= OW; ow += 8) {
      f32x8 a0, a1, b0, b1;
      std::memcpy(&a0, r0 + 2 * ow, sizeof a0);
      std::memcpy(&a1, r0 + 2 * ow + 8, sizeof a1);
      std::memcpy(&b0, r1 + 2 * ow, sizeof b0);
      std::memcpy(&b1, r1 + 2 * ow + 8, sizeof b1);
      const f32x8 cand[3] = {__builtin_shuffle(a0, a1, odd), __builtin_shuffle(b0, b1, even),
                             __builtin_shuffle(b0, b1, odd)};
      const i32x8 offset[3] = {one, one * static_cast<int32_t>(W), one * static_cast<int32_t>(W + 1)};
      f32x8 best = __builtin_shuffle(a0, a1, even);
      i32x8 where = zero;
      for (int q = 0; q < 3; ++q) {
        const f32x8 c = cand[q];
        const i32x8 take = (c > best) | ((c != c) & (best == best));
        best = take ? c : best;
        where = take ? offset[q] : where;
      }
      where += lane + static_cast<int32_t>(2 * oh * W + 2 * ow);
      std::memcpy(out + oh * OW + ow, &best, sizeof best);
      std::memcpy(arg + oh * OW + ow, &where, sizeof where);
    }
    for (; ow < OW; ++ow)
      max_of_window(r0 + 2 * ow, r1 + 2 * ow, 2 * oh * W + 2 * ow, W, out + oh * OW + ow, arg + oh * OW + ow);
  }
}

void maxpool2d_forward(const PoolShape& s, const float* x, float* y, int32_t* argmax) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  if (s.kernel == 2 && s.stride == 2 && s.padding == 0) {
#pragma omp parallel for schedule(static) if (s.planes * H * W >= kParallelMinElements)
    for (int64_t pl = 0; pl < s.planes; ++pl)
      maxpool2x2_plane(x + pl * H * W, W, OH, OW, y + pl * OH * OW, argmax + pl * OH * OW);
    return;
  }
#pragma omp parallel for schedule(static) if (s.planes * H * W >= kParallelMinElements)
  for (int64_t pl = 0; pl < s.planes; ++pl) {
    const float* in = x + pl * H * W;
    float* out = y + pl * OH * OW;
    int32_t* arg = argmax + pl * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = oh * s.stride - s.padding;
      const int64_t hs = std::max<int64_t>(h0, 0), he = std::min<int64_t>(h0 + s.kernel, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = ow * s.stride - s.padding;
        const int64_t ws = std::max<int64_t>(w0, 0), we = std::min<int64_t>(w0 + s.kernel, W);
        float best = -std::numeric_limits<float>::infinity();
        int64_t where = hs * W + ws;
        for (int64_t ih = hs; ih < he; ++ih)
          for (int64_t iw = ws; iw < we; ++iw) {
            const float v = in[ih * W + iw];
            // NaN propagates, as in PyTorch: once best is NaN nothing beats it.
            if (v > best || (v != v && best == best)) {
              best = v;
              where = ih * W + iw;
            }
          }
        out[oh * OW + ow] = best;
        arg[oh * OW + ow] = static_cast<int32_t>(where);
      }
    }
  }
}

void maxpool2d_backward(const PoolShape& s, const float* dy, const int32_t* argmax, float* dx) {
  const int64_t HW = s.height * s.width, P = s.out_height() * s.out_width();
#pragma omp parallel for schedule(static) if (s.planes * HW >= kParallelMinElements)
  for (int64_t pl = 0; pl < s.planes; ++pl) {
    float* g = dx + pl * HW;
    std::fill(g, g + HW, 0.0f);
    const float* d = dy + pl * P;
    const int32_t* arg = argmax + pl * P;
    for (int64_t p = 0; p < P; ++p) g[arg[p]] += d[p];
  }
}

void avgpool2d_forward(const PoolShape& s, const float* x, float* y) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  const float scale = 1.0f / static_cast<float>(s.kernel * s.kernel);
#pragma omp parallel for schedule(static) if (s.planes * H * W >= kParallelMinElements)
  for (int64_t pl = 0; pl < s.planes; ++pl) {
    const float* in = x + pl * H * W;
    float* out = y + pl * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = oh * s.stride - s.padding;
      const int64_t hs = std::max<int64_t>(h0, 0), he = std::min<int64_t>(h0 + s.kernel, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = ow * s.stride - s.padding;
        const int64_t ws = std::max<int64_t>(w0, 0), we = std::min<int64_t>(w0 + s.kernel, W);
        float sum = 0;
        for (int64_t ih = hs; ih < he; ++ih)
          for (int64_t iw = ws; iw < we; ++iw) sum += in[ih * W + iw];
        out[oh * OW + ow] = sum * scale;
      }
    }
  }
}

void avgpool2d_backward(const PoolShape& s, const float* dy, float* dx) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  const float scale = 1.0f / static_cast<float>(s.kernel * s.kernel);
#pragma omp parallel for schedule(static) if (s.planes * H * W >= kParallelMinElements)
  for (int64_t pl = 0; pl < s.planes; ++pl) {
    float* g = dx + pl * H * W;
    std::fill(g, g + H * W, 0.0f);
    const float* d = dy + pl * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t h0 = oh * s.stride - s.padding;
      const int64_t hs = std::max<int64_t>(h0, 0), he = std::min<int64_t>(h0 + s.kernel, H);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t w0 = ow * s.stride - s.padding;
        const int64_t ws = std::max<int64_t>(w0, 0), we = std::min<int64_t>(w0 + s.kernel, W);
        const float v = d[oh * OW + ow] * scale;
        for (int64_t ih = hs; ih < he; ++ih)
          for (int64_t iw = ws; iw < we; ++iw) g[ih * W + iw] += v;
      }
    }
  }
}

namespace {
int64_t window_start(int64_t o, int64_t in, int64_t out) { return (o * in) / out; }
int64_t window_end(int64_t o, int64_t in, int64_t out) { return ((o + 1) * in + out - 1) / out; }
}  // namespace

void adaptive_avgpool2d_forward(int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                const float* x, float* y) {
#pragma omp parallel for schedule(static) if (planes * H * W >= kParallelMinElements)
  for (int64_t pl = 0; pl < planes; ++pl) {
    const float* in = x + pl * H * W;
    float* out = y + pl * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t hs = window_start(oh, H, OH), he = window_end(oh, H, OH);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t ws = window_start(ow, W, OW), we = window_end(ow, W, OW);
        float sum = 0;
        for (int64_t ih = hs; ih < he; ++ih)
          for (int64_t iw = ws; iw < we; ++iw) sum += in[ih * W + iw];
        out[oh * OW + ow] = sum / static_cast<float>((he - hs) * (we - ws));
      }
    }
  }
}

void adaptive_avgpool2d_backward(int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW,
                                 const float* dy, float* dx) {
#pragma omp parallel for schedule(static) if (planes * H * W >= kParallelMinElements)
  for (int64_t pl = 0; pl < planes; ++pl) {
    float* g = dx + pl * H * W;
    std::fill(g, g + H * W, 0.0f);
    const float* d = dy + pl * OH * OW;
    for (int64_t oh = 0; oh < OH; ++oh) {
      const int64_t hs = window_start(oh, H, OH), he = window_end(oh, H, OH);
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t ws = window_start(ow, W, OW), we = window_end(ow, W, OW);
        const float v = d[oh * OW + ow] / static_cast<float>((he - hs) * (we - ws));
        for (int64_t ih = hs; ih < he; ++ih)
          for (int64_t iw = ws; iw < we; ++iw) g[ih * W + iw] += v;
      }
    }
  }
}

}  // namespace pd::cpu
