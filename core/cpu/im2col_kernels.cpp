#include <algorithm>
#include <cstring>

#include "core/cpu/parallel.h"
#include "core/cpu/conv_kernels.h"

namespace pd::cpu {

// One (channel, kernel offset) row of the column matrix, one sample: a
// strided copy with zeros where the window hangs over the padding.
static void unfold_row(const ConvShape& s, const float* plane, int ki, int kj, float* dst) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t ih = oh * s.stride - s.padding + ki;
    float* out = dst + oh * OW;
    if (ih < 0 || ih >= H) {
      std::memset(out, 0, sizeof(float) * OW);
      continue;
    }
    const float* row = plane + ih * W;
    if (s.stride == 1) {
      // Contiguous run [ow_lo, ow_hi) lies inside the image.
      int64_t ow_lo = std::max<int64_t>(0, s.padding - kj);
      int64_t ow_hi = std::min<int64_t>(OW, W + s.padding - kj);
      if (ow_hi < ow_lo) ow_hi = ow_lo;
      for (int64_t ow = 0; ow < ow_lo; ++ow) out[ow] = 0.0f;
      if (ow_hi > ow_lo) std::memcpy(out + ow_lo, row + ow_lo - s.padding + kj, sizeof(float) * (ow_hi - ow_lo));
      for (int64_t ow = ow_hi; ow < OW; ++ow) out[ow] = 0.0f;
    } else {
      for (int64_t ow = 0; ow < OW; ++ow) {
        const int64_t iw = ow * s.stride - s.padding + kj;
        out[ow] = (iw >= 0 && iw < W) ? row[iw] : 0.0f;
      }
    }
  }
}

static void fold_row_add(const ConvShape& s, const float* src, int ki, int kj, float* plane) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t ih = oh * s.stride - s.padding + ki;
    if (ih < 0 || ih >= H) continue;
    const float* in = src + oh * OW;
    float* row = plane + ih * W;
    for (int64_t ow = 0; ow < OW; ++ow) {
      const int64_t iw = ow * s.stride - s.padding + kj;
      if (iw >= 0 && iw < W) row[iw] += in[ow];
    }
  }
}

void im2col(const ConvShape& s, const float* x, int64_t first, int64_t n, float* col) {
  const int64_t C = s.in_channels, k = s.kernel, HW = s.height * s.width;
  const int64_t P = s.out_height() * s.out_width(), ld = n * P;
  // Each (sample, channel) pair writes its own k*k row segments: no overlap.
#pragma omp parallel for collapse(2) schedule(static) if (C * k * k * n * P >= kParallelMinElements)
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < n; ++i) {
      const float* plane = x + ((first + i) * C + c) * HW;
      for (int ki = 0; ki < k; ++ki)
        for (int kj = 0; kj < k; ++kj) {
          const int64_t r = (c * k + ki) * k + kj;
          unfold_row(s, plane, ki, kj, col + r * ld + i * P);
        }
    }
}

void col2im_add(const ConvShape& s, const float* col, int64_t first, int64_t n, float* dx) {
  const int64_t C = s.in_channels, k = s.kernel, HW = s.height * s.width;
  const int64_t P = s.out_height() * s.out_width(), ld = n * P;
  // Every input plane is owned by one thread, which adds its k*k
  // contributions in a fixed order: deterministic for any thread count.
#pragma omp parallel for collapse(2) schedule(static) if (C * k * k * n * P >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < C; ++c) {
      float* plane = dx + ((first + i) * C + c) * HW;
      for (int ki = 0; ki < k; ++ki)
        for (int kj = 0; kj < k; ++kj) {
          const int64_t r = (c * k + ki) * k + kj;
          fold_row_add(s, col + r * ld + i * P, ki, kj, plane);
        }
    }
}

}  // namespace pd::cpu
