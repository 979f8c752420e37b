#include <algorithm>
#include <type_traits>
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
  const int64_t OW = s.out_w(), off = kj - s.padding;  // iw = ow*stride + off
  int64_t lo = off >= 0 ? 0 : (-off + s.stride - 1) / s.stride;
  int64_t hi = s.in_w - off <= 0 ? 0 : (s.in_w - off + s.stride - 1) / s.stride;
  lo = std::min(lo, OW);
  hi = std::max(lo, std::min(hi, OW));
  return {lo, hi};
}

// One (channel, kernel offset) row of the column matrix, one sample: a
// strided copy with zeros where the window hangs over the padding.
void unfold_row(const ConvShape& s, const float* plane, int ki, int kj, ColumnRange r, float* dst) {
  const int64_t H = s.in_h, W = s.in_w, OH = s.out_h(), OW = s.out_w();
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
  const int64_t H = s.in_h, W = s.in_w, OH = s.out_h(), OW = s.out_w();
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

// Rows of a window, `width` floats each, to consecutive rows of dst. A
// compile-time width turns each row into straight vector moves; feature
// maps are small (2 to 32 pixels wide), where a runtime-length loop spends
// more time on its prologue and epilogue than on copying.
template <int64_t kWidth>
void copy_window(const float* src, int64_t src_stride, int64_t rows, int64_t width, float* dst) {
  const int64_t w = kWidth > 0 ? kWidth : width;
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = src + r * src_stride;
    float* out = dst + r * w;
    for (int64_t j = 0; j < w; ++j) out[j] = in[j];
  }
}

// Calls fn(std::integral_constant<int64_t, W>{}) for the feature-map widths
// worth a compiled copy (W = 0: any other width, read at run time).
template <typename Fn>
void with_window_width(int64_t width, Fn&& fn) {
  switch (width) {
    case 2: return fn(std::integral_constant<int64_t, 2>{});
    case 4: return fn(std::integral_constant<int64_t, 4>{});
    case 7: return fn(std::integral_constant<int64_t, 7>{});
    case 8: return fn(std::integral_constant<int64_t, 8>{});
    case 14: return fn(std::integral_constant<int64_t, 14>{});
    case 16: return fn(std::integral_constant<int64_t, 16>{});
    case 28: return fn(std::integral_constant<int64_t, 28>{});
    case 32: return fn(std::integral_constant<int64_t, 32>{});
    default: return fn(std::integral_constant<int64_t, 0>{});
  }
}

void copy_window_any(const float* src, int64_t src_stride, int64_t rows, int64_t width, float* dst) {
  with_window_width(width, [&](auto w) { copy_window<decltype(w)::value>(src, src_stride, rows, width, dst); });
}

// The transpose of copy_window: adds consecutive rows of src into a window.
template <int64_t kWidth>
void add_to_window(const float* src, int64_t rows, int64_t width, float* dst, int64_t dst_stride) {
  const int64_t w = kWidth > 0 ? kWidth : width;
  for (int64_t r = 0; r < rows; ++r) {
    const float* in = src + r * w;
    float* out = dst + r * dst_stride;
    for (int64_t j = 0; j < w; ++j) out[j] += in[j];
  }
}

void add_to_window_any(const float* src, int64_t rows, int64_t width, float* dst, int64_t dst_stride) {
  with_window_width(width, [&](auto w) { add_to_window<decltype(w)::value>(src, rows, width, dst, dst_stride); });
}

// Stride 1: the plane is copied once into a zero-bordered buffer (skipped
// without padding), after which the k*k column rows of this (sample,
// channel) are plain window copies with no bounds logic. Writes the rows
// (c*k + ki)*k + kj of this sample's columns, i.e. dst + (ki*k + kj)*ld.
void unfold_plane_stride1(const ConvShape& s, const float* plane, std::vector<float>& padded, float* dst,
                          int64_t ld) {
  const int64_t H = s.in_h, W = s.in_w, p = s.padding, Wp = W + 2 * p, Hp = H + 2 * p;
  const int64_t OH = s.out_h(), OW = s.out_w();
  const float* src = plane;
  if (p > 0) {
    padded.assign(static_cast<size_t>(Hp * Wp), 0.0f);
    for (int64_t h = 0; h < H; ++h) std::copy(plane + h * W, plane + (h + 1) * W, padded.data() + (h + p) * Wp + p);
    src = padded.data();
  }
  const int k = static_cast<int>(s.kernel_h);
  for (int ki = 0; ki < k; ++ki)
    for (int kj = 0; kj < k; ++kj) copy_window_any(src + ki * Wp + kj, Wp, OH, OW, dst + (ki * k + kj) * ld);
}

// Inverse of unfold_plane_stride1: plane += the k*k rows at src. The
// plane's values are staged in the zero-bordered buffer and each element
// receives its contributions in (ki, kj) order, as in fold_row_add, so the
// sums are bitwise those of the general path.
void fold_plane_stride1(const ConvShape& s, const float* src, int64_t ld, std::vector<float>& padded, float* plane) {
  const int64_t H = s.in_h, W = s.in_w, p = s.padding, Wp = W + 2 * p, Hp = H + 2 * p;
  const int64_t OH = s.out_h(), OW = s.out_w();
  float* acc = plane;
  if (p > 0) {
    padded.assign(static_cast<size_t>(Hp * Wp), 0.0f);
    for (int64_t h = 0; h < H; ++h) std::copy(plane + h * W, plane + (h + 1) * W, padded.data() + (h + p) * Wp + p);
    acc = padded.data();
  }
  const int k = static_cast<int>(s.kernel_h);
  for (int ki = 0; ki < k; ++ki)
    for (int kj = 0; kj < k; ++kj) add_to_window_any(src + (ki * k + kj) * ld, OH, OW, acc + ki * Wp + kj, Wp);
  if (p > 0)
    for (int64_t h = 0; h < H; ++h)
      std::copy(padded.data() + (h + p) * Wp + p, padded.data() + (h + p) * Wp + p + W, plane + h * W);
}

}  // namespace

// Work items are (channel, sample) pairs, c-major for im2col and sample-
// major for col2im; each writes its own rows / its own input plane, so no
// two threads touch the same output and any split gives the same bits.
void im2col(const ConvShape& s, const float* x, int64_t first, int64_t n, float* col) {
  const int64_t C = s.in_channels, k = s.kernel_h, HW = s.in_h * s.in_w;
  const int64_t P = s.out_h() * s.out_w(), ld = n * P;
  if (s.stride == 1) {
    parallel_ranges(C * n, C * k * k * n * P, [&](int64_t begin, int64_t end) {
      std::vector<float> padded;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t c = item / n, i = item % n;
        unfold_plane_stride1(s, x + ((first + i) * C + c) * HW, padded, col + c * k * k * ld + i * P, ld);
      }
    });
    return;
  }
  std::vector<ColumnRange> cols(k);
  for (int kj = 0; kj < k; ++kj) cols[kj] = valid_columns(s, kj);
  parallel_ranges(C * n, C * k * k * n * P, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t c = item / n, i = item % n;
      const float* plane = x + ((first + i) * C + c) * HW;
      for (int ki = 0; ki < k; ++ki)
        for (int kj = 0; kj < k; ++kj) {
          const int64_t r = (c * k + ki) * k + kj;
          unfold_row(s, plane, ki, kj, cols[kj], col + r * ld + i * P);
        }
    }
  });
}

void col2im_add(const ConvShape& s, const float* col, int64_t first, int64_t n, float* dx) {
  const int64_t C = s.in_channels, k = s.kernel_h, HW = s.in_h * s.in_w;
  const int64_t P = s.out_h() * s.out_w(), ld = n * P;
  if (s.stride == 1) {
    // Every input plane is owned by one thread: deterministic for any thread count.
    parallel_ranges(n * C, C * k * k * n * P, [&](int64_t begin, int64_t end) {
      std::vector<float> padded;
      for (int64_t item = begin; item < end; ++item) {
        const int64_t i = item / C, c = item % C;
        fold_plane_stride1(s, col + c * k * k * ld + i * P, ld, padded, dx + ((first + i) * C + c) * HW);
      }
    });
    return;
  }
  std::vector<ColumnRange> cols(k);
  for (int kj = 0; kj < k; ++kj) cols[kj] = valid_columns(s, kj);
  // Every input plane is owned by one thread, which adds its k*k
  // contributions in a fixed order: deterministic for any thread count.
  parallel_ranges(n * C, C * k * k * n * P, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t i = item / C, c = item % C;
      float* plane = dx + ((first + i) * C + c) * HW;
      for (int ki = 0; ki < k; ++ki)
        for (int kj = 0; kj < k; ++kj) {
          const int64_t r = (c * k + ki) * k + kj;
          fold_row_add(s, col + r * ld + i * P, ki, kj, cols[kj], plane);
        }
    }
  });
}

}  // namespace pd::cpu
