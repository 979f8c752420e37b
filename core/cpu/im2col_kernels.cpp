#include <algorithm>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/cpu/conv_kernels.h"

namespace pd::cpu {

namespace {

// Output columns ow whose input column ow*stride - padding + kj lies inside
// the image: [lo, hi). Computed once per kernel column so the inner loops
// carry no bounds checks (and vectorise for stride 1).
struct ColumnRange {
  int64_t lo, hi;
};
ColumnRange valid_columns(const ConvShape& s, int kj) {
  const int64_t OW = s.out_width(), off = kj - s.padding;  // iw = ow*stride + off
  int64_t lo = off >= 0 ? 0 : (-off + s.stride - 1) / s.stride;
  int64_t hi = s.width - off <= 0 ? 0 : (s.width - off + s.stride - 1) / s.stride;
  lo = std::min(lo, OW);
  hi = std::max(lo, std::min(hi, OW));
  return {lo, hi};
}

// One (channel, kernel offset) row of the column matrix, one sample: a
// strided copy with zeros where the window hangs over the padding.
void unfold_row(const ConvShape& s, const float* plane, int ki, int kj, ColumnRange r, float* dst) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  const int64_t st = s.stride, off = kj - s.padding;
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t ih = oh * st - s.padding + ki;
    float* out = dst + oh * OW;
    if (ih < 0 || ih >= H) {
      for (int64_t ow = 0; ow < OW; ++ow) out[ow] = 0.0f;
      continue;
    }
    const float* row = plane + ih * W + off;
    for (int64_t ow = 0; ow < r.lo; ++ow) out[ow] = 0.0f;
    if (st == 1)
      for (int64_t ow = r.lo; ow < r.hi; ++ow) out[ow] = row[ow];
    else
      for (int64_t ow = r.lo; ow < r.hi; ++ow) out[ow] = row[ow * st];
    for (int64_t ow = r.hi; ow < OW; ++ow) out[ow] = 0.0f;
  }
}

void fold_row_add(const ConvShape& s, const float* src, int ki, int kj, ColumnRange r, float* plane) {
  const int64_t H = s.height, W = s.width, OH = s.out_height(), OW = s.out_width();
  const int64_t st = s.stride, off = kj - s.padding;
  for (int64_t oh = 0; oh < OH; ++oh) {
    const int64_t ih = oh * st - s.padding + ki;
    if (ih < 0 || ih >= H) continue;
    const float* in = src + oh * OW;
    float* row = plane + ih * W + off;
    if (st == 1)
      for (int64_t ow = r.lo; ow < r.hi; ++ow) row[ow] += in[ow];
    else
      for (int64_t ow = r.lo; ow < r.hi; ++ow) row[ow * st] += in[ow];
  }
}

}  // namespace

void im2col(const ConvShape& s, const float* x, int64_t first, int64_t n, float* col) {
  const int64_t C = s.in_channels, k = s.kernel, HW = s.height * s.width;
  const int64_t P = s.out_height() * s.out_width(), ld = n * P;
  std::vector<ColumnRange> cols(k);
  for (int kj = 0; kj < k; ++kj) cols[kj] = valid_columns(s, kj);
  // Each (sample, channel) pair writes its own k*k row segments: no overlap.
#pragma omp parallel for collapse(2) schedule(static) if (C * k * k * n * P >= kParallelMinElements)
  for (int64_t c = 0; c < C; ++c)
    for (int64_t i = 0; i < n; ++i) {
      const float* plane = x + ((first + i) * C + c) * HW;
      for (int ki = 0; ki < k; ++ki)
        for (int kj = 0; kj < k; ++kj) {
          const int64_t r = (c * k + ki) * k + kj;
          unfold_row(s, plane, ki, kj, cols[kj], col + r * ld + i * P);
        }
    }
}

void col2im_add(const ConvShape& s, const float* col, int64_t first, int64_t n, float* dx) {
  const int64_t C = s.in_channels, k = s.kernel, HW = s.height * s.width;
  const int64_t P = s.out_height() * s.out_width(), ld = n * P;
  std::vector<ColumnRange> cols(k);
  for (int kj = 0; kj < k; ++kj) cols[kj] = valid_columns(s, kj);
  // Every input plane is owned by one thread, which adds its k*k
  // contributions in a fixed order: deterministic for any thread count.
#pragma omp parallel for collapse(2) schedule(static) if (C * k * k * n * P >= kParallelMinElements)
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < C; ++c) {
      float* plane = dx + ((first + i) * C + c) * HW;
      for (int ki = 0; ki < k; ++ki)
        for (int kj = 0; kj < k; ++kj) {
          const int64_t r = (c * k + ki) * k + kj;
          fold_row_add(s, col + r * ld + i * P, ki, kj, cols[kj], plane);
        }
    }
}

}  // namespace pd::cpu
