#include "core/cpu/conv_dense_kernels.h"

#include <algorithm>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/cpu/parallel.h"
#include "core/cpu/scratch.h"

namespace pd::cpu {

namespace {
constexpr int kDenseWeightsSlot = 0;
constexpr int64_t kMaxDenseWeightFloats = int64_t{1} << 22;

}  // namespace

bool conv_dense_is_cheaper(const ConvShape& s) {
  const int64_t HW = s.in_h * s.in_w, P = s.out_h() * s.out_w();
  return HW < int64_t{s.kernel_h} * s.kernel_h && s.out_channels * P * s.in_channels * HW <= kMaxDenseWeightFloats;
}

namespace {

// The (output pixel p, input pixel q, kernel tap ki*k + kj) triples where
// the kernel lands inside the image: the same for every channel pair.
struct Tap {
  int32_t p, q, t;
};
std::vector<Tap> taps_inside(const ConvShape& s) {
  std::vector<Tap> taps;
  const int64_t OH = s.out_h(), OW = s.out_w(), k = s.kernel_h;
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int64_t ow = 0; ow < OW; ++ow)
      for (int64_t ki = 0; ki < k; ++ki) {
        const int64_t ih = oh * s.stride - s.padding + ki;
        if (ih < 0 || ih >= s.in_h) continue;
        for (int64_t kj = 0; kj < k; ++kj) {
          const int64_t iw = ow * s.stride - s.padding + kj;
          if (iw >= 0 && iw < s.in_w)
            taps.push_back({static_cast<int32_t>(oh * OW + ow), static_cast<int32_t>(ih * s.in_w + iw),
                            static_cast<int32_t>(ki * k + kj)});
        }
      }
  return taps;
}

// Wd's block for channels (o, c) is [P, HW] at wd + o*P*cols + c*HW.
void dense_weights(const ConvShape& s, const std::vector<Tap>& taps, const float* w, float* wd) {
  const int64_t P = s.out_h() * s.out_w(), HW = s.in_h * s.in_w, C = s.in_channels;
  const int64_t cols = C * HW, kk = int64_t{s.kernel_h} * s.kernel_h;
  const int64_t n = static_cast<int64_t>(taps.size());
  std::vector<int64_t> at(taps.size());  // offset of each tap's entry in a block
  for (int64_t j = 0; j < n; ++j) at[j] = taps[j].p * cols + taps[j].q;
#pragma omp parallel for schedule(static) if (s.out_channels * P * cols >= kParallelMinElements)
  for (int64_t o = 0; o < s.out_channels; ++o) {
    std::fill_n(wd + o * P * cols, P * cols, 0.0f);
    for (int64_t c = 0; c < C; ++c) {
      const float* wk = w + (o * C + c) * kk;
      float* block = wd + o * P * cols + c * HW;
      for (int64_t j = 0; j < n; ++j) block[at[j]] = wk[taps[j].t];
    }
  }
}

// dw += the entries of dWd each weight was copied to, in tap order.
void fold_dense_weights(const ConvShape& s, const std::vector<Tap>& taps, const float* dwd, float* dw) {
  const int64_t P = s.out_h() * s.out_w(), HW = s.in_h * s.in_w, C = s.in_channels;
  const int64_t cols = C * HW, kk = int64_t{s.kernel_h} * s.kernel_h;
  const int64_t n = static_cast<int64_t>(taps.size());
  std::vector<int64_t> at(taps.size());
  for (int64_t j = 0; j < n; ++j) at[j] = taps[j].p * cols + taps[j].q;
#pragma omp parallel for schedule(static) if (s.out_channels * P * cols >= kParallelMinElements)
  for (int64_t o = 0; o < s.out_channels; ++o)
    for (int64_t c = 0; c < C; ++c) {
      float* dk = dw + (o * C + c) * kk;
      const float* block = dwd + o * P * cols + c * HW;
      for (int64_t j = 0; j < n; ++j) dk[taps[j].t] += block[at[j]];
    }
}

}  // namespace

void conv2d_dense_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t P = s.out_h() * s.out_w(), rows = s.out_channels * P;
  const int64_t cols = s.in_channels * s.in_h * s.in_w;
  float* wd = Scratch::floats(static_cast<size_t>(rows * cols), kDenseWeightsSlot);
  dense_weights(s, taps_inside(s), w, wd);
  if (bias)
    for (int64_t i = 0; i < s.batch; ++i)
      for (int64_t o = 0; o < s.out_channels; ++o) std::fill_n(y + i * rows + o * P, P, bias[o]);
  gemm(false, true, s.batch, rows, cols, 1.0f, x, cols, wd, cols, bias ? 1.0f : 0.0f, y, rows);
}

void conv2d_dense_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw) {
  const int64_t P = s.out_h() * s.out_w(), rows = s.out_channels * P;
  const int64_t cols = s.in_channels * s.in_h * s.in_w;
  const std::vector<Tap> taps = taps_inside(s);
  float* wd = Scratch::floats(static_cast<size_t>(rows * cols), kDenseWeightsSlot);
  if (dx) {
    dense_weights(s, taps, w, wd);
    gemm(false, false, s.batch, cols, rows, 1.0f, dy, rows, wd, cols, 0.0f, dx, cols);
  }
  // dWd = dy^T x, then each weight collects the entries it was copied to.
  if (!dw) return;
  gemm(true, false, rows, cols, s.batch, 1.0f, dy, rows, x, cols, 0.0f, wd, cols);
  fold_dense_weights(s, taps, wd, dw);
}

}  // namespace pd::cpu
