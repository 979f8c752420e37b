#include "core/cpu/conv_kernels.h"

#include <algorithm>

#include "core/cpu/gemm.h"
#include "core/cpu/parallel.h"
#include "core/cpu/scratch.h"

namespace pd::cpu {

namespace {
// A chunk's GEMMs get at least this many columns (samples x output pixels)
// so they stay efficient for small feature maps ...
constexpr int64_t kMinColumns = 256;
// ... and its column matrix at most this many floats (4 MiB), so im2col
// writes and the GEMM reads it while it is still in cache.
constexpr int64_t kMaxColumnFloats = int64_t{1} << 20;

// 1x1 stride-1 unpadded: a sample's column matrix is the sample itself.
bool pointwise(const ConvShape& s) { return s.kernel == 1 && s.stride == 1 && s.padding == 0; }
}  // namespace

int64_t conv_chunk_samples(const ConvShape& s) {
  const int64_t P = std::max<int64_t>(s.out_height() * s.out_width(), 1);
  const int64_t wanted = (kMinColumns + P - 1) / P;
  const int64_t fit = std::max<int64_t>(1, kMaxColumnFloats / (s.patch() * P));
  return std::max<int64_t>(1, std::min({wanted, fit, s.batch}));
}

// With one sample per chunk the GEMM's [O, P] output is the sample's own
// NCHW block, so the kernels use x, y, dy and dx in place and skip the
// transposes (and for pointwise convs, im2col and col2im too).
void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t O = s.out_channels, K = s.patch(), P = s.out_height() * s.out_width();
  const int64_t in_plane = s.in_channels * s.height * s.width;
  const int64_t chunk = conv_chunk_samples(s);
  float* col = Scratch::floats(static_cast<size_t>(K * chunk * P), 0);
  float* out = chunk > 1 ? Scratch::floats(static_cast<size_t>(O * chunk * P), 1) : nullptr;
  for (int64_t first = 0; first < s.batch; first += chunk) {
    const int64_t n = std::min(chunk, s.batch - first), ld = n * P;
    const float* cols = col;
    if (n == 1 && pointwise(s))
      cols = x + first * in_plane;
    else
      im2col(s, x, first, n, col);
    float* dst = n == 1 ? y + first * O * P : out;
    gemm(false, false, O, ld, K, 1.0f, w, K, cols, ld, 0.0f, dst, ld);
    if (n == 1) {
      if (bias)
        for (int64_t o = 0; o < O; ++o)
          for (int64_t p = 0; p < P; ++p) dst[o * P + p] += bias[o];
      continue;
    }
    // [O, n*P] -> [n, O, P] plus bias.
#pragma omp parallel for collapse(2) schedule(static) if (n * O * P >= kParallelMinElements)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < O; ++o) {
        const float* src = out + o * ld + i * P;
        float* yo = y + ((first + i) * O + o) * P;
        const float b = bias ? bias[o] : 0.0f;
        for (int64_t p = 0; p < P; ++p) yo[p] = src[p] + b;
      }
  }
}

void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx,
                     float* dw, float* dbias) {
  const int64_t O = s.out_channels, K = s.patch(), P = s.out_height() * s.out_width();
  const int64_t N = s.batch;
  if (dbias) {
#pragma omp parallel for schedule(static) if (N * O * P >= kParallelMinElements)
    for (int64_t o = 0; o < O; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < N; ++i) {
        const float* g = dy + (i * O + o) * P;
        float part = 0;
        for (int64_t p = 0; p < P; ++p) part += g[p];
        acc += part;
      }
      dbias[o] += static_cast<float>(acc);
    }
  }
  const int64_t chunk = conv_chunk_samples(s);
  float* col = Scratch::floats(static_cast<size_t>(K * chunk * P), 0);
  float* dyt = chunk > 1 ? Scratch::floats(static_cast<size_t>(O * chunk * P), 1) : nullptr;
  const int64_t in_plane = s.in_channels * s.height * s.width;
  for (int64_t first = 0; first < N; first += chunk) {
    const int64_t n = std::min(chunk, N - first), ld = n * P;
    const float* g = dy + first * O * P;
    if (n > 1) {
      // [n, O, P] -> [O, n*P], the layout of the forward GEMM's output.
#pragma omp parallel for collapse(2) schedule(static) if (n * O * P >= kParallelMinElements)
      for (int64_t o = 0; o < O; ++o)
        for (int64_t i = 0; i < n; ++i) {
          const float* src = dy + ((first + i) * O + o) * P;
          float* dst = dyt + o * ld + i * P;
          for (int64_t p = 0; p < P; ++p) dst[p] = src[p];
        }
      g = dyt;
    }
    const bool direct = n == 1 && pointwise(s);
    const float* cols = col;
    if (direct)
      cols = x + first * in_plane;
    else
      im2col(s, x, first, n, col);
    gemm(false, true, O, K, ld, 1.0f, g, ld, cols, ld, 1.0f, dw, K);
    if (!dx) continue;
    if (direct) {
      gemm(true, false, K, ld, O, 1.0f, w, K, g, ld, 0.0f, dx + first * in_plane, ld);
      continue;
    }
    // The columns are no longer needed: reuse them for dL/dcol.
    gemm(true, false, K, ld, O, 1.0f, w, K, g, ld, 0.0f, col, ld);
    float* dxc = dx + first * in_plane;
#pragma omp parallel for schedule(static) if (n * in_plane >= kParallelMinElements)
    for (int64_t i = 0; i < n; ++i) std::fill(dxc + i * in_plane, dxc + (i + 1) * in_plane, 0.0f);
    col2im_add(s, col, first, n, dx);
  }
}

}  // namespace pd::cpu
