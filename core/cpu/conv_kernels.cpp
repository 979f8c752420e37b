#include "core/cpu/conv_kernels.h"

#include <algorithm>

#include "core/cpu/gemm.h"
#include "core/cpu/parallel.h"
#include "core/cpu/scratch.h"

namespace pd::cpu {

namespace {
// Upper bound on one column matrix (floats): 64 MiB.
constexpr int64_t kMaxColumnFloats = int64_t{1} << 24;
}  // namespace

int64_t conv_chunk_samples(const ConvShape& s) {
  const int64_t per_sample = s.patch() * s.out_height() * s.out_width();
  const int64_t fit = std::max<int64_t>(1, kMaxColumnFloats / std::max<int64_t>(per_sample, 1));
  return std::min<int64_t>(std::max<int64_t>(s.batch, 1), fit);
}

void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t O = s.out_channels, K = s.patch(), P = s.out_height() * s.out_width();
  const int64_t chunk = conv_chunk_samples(s);
  float* col = Scratch::floats(static_cast<size_t>(K * chunk * P), 0);
  float* out = Scratch::floats(static_cast<size_t>(O * chunk * P), 1);
  for (int64_t first = 0; first < s.batch; first += chunk) {
    const int64_t n = std::min(chunk, s.batch - first), ld = n * P;
    im2col(s, x, first, n, col);
    gemm(false, false, O, ld, K, 1.0f, w, K, col, ld, 0.0f, out, ld);
    // [O, n*P] -> [n, O, P] plus bias.
#pragma omp parallel for collapse(2) schedule(static) if (n * O * P >= kParallelMinElements)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t o = 0; o < O; ++o) {
        const float* src = out + o * ld + i * P;
        float* dst = y + ((first + i) * O + o) * P;
        const float b = bias ? bias[o] : 0.0f;
        for (int64_t p = 0; p < P; ++p) dst[p] = src[p] + b;
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
  float* dyt = Scratch::floats(static_cast<size_t>(O * chunk * P), 1);
  const int64_t in_plane = s.in_channels * s.height * s.width;
  for (int64_t first = 0; first < N; first += chunk) {
    const int64_t n = std::min(chunk, N - first), ld = n * P;
    // [n, O, P] -> [O, n*P], the layout of the forward GEMM's output.
#pragma omp parallel for collapse(2) schedule(static) if (n * O * P >= kParallelMinElements)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t i = 0; i < n; ++i) {
        const float* src = dy + ((first + i) * O + o) * P;
        float* dst = dyt + o * ld + i * P;
        for (int64_t p = 0; p < P; ++p) dst[p] = src[p];
      }
    im2col(s, x, first, n, col);
    gemm(false, true, O, K, ld, 1.0f, dyt, ld, col, ld, 1.0f, dw, K);
    if (dx) {
      // The columns are no longer needed: reuse them for dL/dcol.
      gemm(true, false, K, ld, O, 1.0f, w, K, dyt, ld, 0.0f, col, ld);
      float* dxc = dx + first * in_plane;
#pragma omp parallel for schedule(static) if (n * in_plane >= kParallelMinElements)
      for (int64_t i = 0; i < n; ++i) std::fill(dxc + i * in_plane, dxc + (i + 1) * in_plane, 0.0f);
      col2im_add(s, col, first, n, dx);
    }
  }
}

}  // namespace pd::cpu
