#include "core/cpu/conv_direct_kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/cpu/scratch.h"

// Only the functions marked so use AVX-512; they run only after
// conv_direct_available() said yes, so the binary still runs on AVX2 hosts.
#define PD_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))

namespace pd::cpu {

namespace {

// Register tiles, 24 accumulators each. Forward: kForwardOut output
// channels x kPixelVectors x 16 grid pixels, fed per tap by kPixelVectors
// (unaligned) loads and kForwardOut broadcasts. Weight gradient:
// kWeightOut output channels x kTapBlock taps, fed per 16 pixels by
// kWeightOut + kTapBlock loads.
constexpr int kForwardOut = 8, kPixelVectors = 3, kWeightOut = 4, kTapBlock = 6;
constexpr int64_t kPixelTile = 16 * kPixelVectors;

// Scratch slots: 0 and 1 are per-thread (each thread's sample); 4 and 5
// belong to the calling thread and are shared by its workers. Slot 2 holds
// the flipped kernel while conv_kernels.cpp computes dx through us.
constexpr int kGridSlot = 0, kRowsSlot = 1, kWeightsSlot = 4, kSumsSlot = 5;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// One sample's input as stride^2 phase planes per channel: plane
// (c, py, px) row i, column j holds the padded input at row py + S*i,
// column px + S*j. Output pixel (oh, ow) sits at q = oh*width + ow of the
// output grid, and tap (c, ky, kx) reads plane (c, ky%S, kx%S) at
// q + (ky/S)*width + kx/S: one offset per tap.
struct Grid {
  int64_t S = 1, reach = 0, width = 0, rows = 0, plane = 0;
  int64_t pixels = 0;  // output grid pixels, OH * width
  int64_t padded = 0;  // pixels rounded up to whole tiles
  int64_t floats = 0;  // the input grid, with slack for the last tile's reads
};

Grid grid_of(const ConvShape& s) {
  Grid g;
  g.S = s.stride;
  g.reach = (s.kernel_h - 1) / g.S;
  g.width = s.out_w() + g.reach;
  g.rows = s.out_h() + g.reach;
  g.plane = g.rows * g.width;
  g.pixels = s.out_h() * g.width;
  g.padded = round_up(g.pixels, kPixelTile);
  g.floats = s.in_channels * g.S * g.S * g.plane + (g.padded - g.pixels) + g.reach;
  return g;
}

// Grid offsets of the taps, in w's order (c, ky, kx), padded with zeros
// (a harmless read) to a whole number of tap blocks.
std::vector<int32_t> tap_offsets(const ConvShape& s, const Grid& g) {
  const int64_t k = s.kernel_h, S = g.S;
  std::vector<int32_t> off;
  off.reserve(static_cast<size_t>(round_up(s.patch(), kTapBlock)));
  for (int64_t c = 0; c < s.in_channels; ++c)
    for (int64_t ky = 0; ky < k; ++ky)
      for (int64_t kx = 0; kx < k; ++kx)
        off.push_back(static_cast<int32_t>(((c * S + ky % S) * S + kx % S) * g.plane + (ky / S) * g.width + kx / S));
  off.resize(static_cast<size_t>(round_up(s.patch(), kTapBlock)), 0);
  return off;
}

// Sample n's grid (see Grid). Padding and slack are zeros.
void fill_grid(const ConvShape& s, const Grid& g, const float* x, int64_t n, float* grid) {
  const int64_t H = s.in_h, W = s.in_w, S = g.S, p = s.padding;
  const float* xs = x + n * s.in_channels * H * W;
  float* dst = grid;
  for (int64_t c = 0; c < s.in_channels; ++c)
    for (int64_t py = 0; py < S; ++py)
      for (int64_t px = 0; px < S; ++px) {
        // Columns j with 0 <= px + S*j - p < W.
        const int64_t j0 = std::min(g.width, std::max<int64_t>(0, (p - px + S - 1) / S));
        const int64_t j1 = std::max(j0, std::min(g.width, (W + p - px + S - 1) / S));
        for (int64_t i = 0; i < g.rows; ++i, dst += g.width) {
          const int64_t r = py + S * i - p;
          if (r < 0 || r >= H || j0 == j1) {
            std::fill(dst, dst + g.width, 0.0f);
            continue;
          }
          std::fill(dst, dst + j0, 0.0f);
          const float* src = xs + (c * H + r) * W + (px + S * j0 - p);
          if (S == 1)
            std::memcpy(dst + j0, src, static_cast<size_t>(j1 - j0) * sizeof(float));
          else
            for (int64_t j = j0; j < j1; ++j) dst[j] = src[(j - j0) * S];
          std::fill(dst + j1, dst + g.width, 0.0f);
        }
      }
  std::fill(dst, grid + g.floats, 0.0f);
}

// out[i][0 .. 16*PV) = start[i] + sum over taps t of wp[t][i] * in[off[t] + ...],
// start being out itself (add), else bias (or zero when null).
template <int OB, int PV>
PD_AVX512 void forward_tile(const float* in, const int32_t* off, int64_t taps, const float* wp, const float* bias,
                            bool add, float* out, int64_t ld) {
  __m512 acc[OB][PV];
  for (int i = 0; i < OB; ++i) {
    const __m512 b = bias ? _mm512_set1_ps(bias[i]) : _mm512_setzero_ps();
    for (int v = 0; v < PV; ++v) acc[i][v] = add ? _mm512_loadu_ps(out + i * ld + 16 * v) : b;
  }
  for (int64_t t = 0; t < taps; ++t) {
    const float* src = in + off[t];
    const float* wt = wp + t * OB;
    __m512 xv[PV];
    for (int v = 0; v < PV; ++v) xv[v] = _mm512_loadu_ps(src + 16 * v);
    for (int i = 0; i < OB; ++i) {
      const __m512 wb = _mm512_set1_ps(wt[i]);
      for (int v = 0; v < PV; ++v) acc[i][v] = _mm512_fmadd_ps(wb, xv[v], acc[i][v]);
    }
  }
  for (int i = 0; i < OB; ++i)
    for (int v = 0; v < PV; ++v) _mm512_storeu_ps(out + i * ld + 16 * v, acc[i][v]);
}

// acc[i][j] (16 lanes each, OB x TB contiguous) += sum over the samples
// and over q < pixels of dy[i][q] * grid[off[j] + q], lane q % 16 (pixels
// a multiple of 16; dy is zero outside the output). Summed per lane in
// sample and pixel order, reduced across lanes only at the end.
template <int OB, int TB>
PD_AVX512 void weight_tile(const float* dy, int64_t ld, int64_t dy_stride, const float* grid, int64_t grid_stride,
                           const int32_t* off, int64_t pixels, int64_t samples, float* acc_out) {
  __m512 acc[OB][TB];
  for (int i = 0; i < OB; ++i)
    for (int j = 0; j < TB; ++j) acc[i][j] = _mm512_loadu_ps(acc_out + (i * TB + j) * 16);
  for (int64_t n = 0; n < samples; ++n) {
    const float* dn = dy + n * dy_stride;
    const float* src[TB];
    for (int j = 0; j < TB; ++j) src[j] = grid + n * grid_stride + off[j];
    for (int64_t q = 0; q < pixels; q += 16) {
      __m512 d[OB];
      for (int i = 0; i < OB; ++i) d[i] = _mm512_loadu_ps(dn + i * ld + q);
      for (int j = 0; j < TB; ++j) {
        const __m512 xv = _mm512_loadu_ps(src[j] + q);
        for (int i = 0; i < OB; ++i) acc[i][j] = _mm512_fmadd_ps(d[i], xv, acc[i][j]);
      }
    }
  }
  for (int i = 0; i < OB; ++i)
    for (int j = 0; j < TB; ++j) _mm512_storeu_ps(acc_out + (i * TB + j) * 16, acc[i][j]);
}

// wp[b][t][i] = w[b*kForwardOut + i][t], zero past the last channel.
void pack_weights(const ConvShape& s, const float* w, float* wp) {
  const int64_t O = s.out_channels, T = s.patch(), blocks = round_up(O, kForwardOut) / kForwardOut;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < kForwardOut; ++i) {
        const int64_t o = b * kForwardOut + i;
        wp[(b * T + t) * kForwardOut + i] = o < O ? w[o * T + t] : 0.0f;
      }
}

// The parameters shared by a call's samples.
struct ForwardPlan {
  ConvShape s;
  Grid g;
  std::vector<int32_t> off;
  const float* wp;
  std::vector<float> bias;  // padded to whole blocks; empty without bias
  int64_t channel_block = 1;
};

// What a pixel tile reads of the input should stay in L1 while every
// output block reads it: input channels per pass over the output blocks
// (passes add to the output tile).
constexpr int64_t kTileInputBytes = 24 << 10;

int64_t channel_block(const ConvShape& s, const Grid& g) {
  const int64_t per_channel = g.S * g.S * (kPixelTile + g.reach * (g.width + 1)) * int64_t{sizeof(float)};
  const int64_t most = std::max<int64_t>(1, kTileInputBytes / per_channel);
  const int64_t passes = (s.in_channels + most - 1) / most;
  return (s.in_channels + passes - 1) / passes;
}

PD_AVX512 void forward_sample(const ForwardPlan& f, const float* x, int64_t n, float* y) {
  const ConvShape& s = f.s;
  const Grid& g = f.g;
  const int64_t T = s.patch(), blocks = round_up(s.out_channels, kForwardOut) / kForwardOut;
  float* grid = Scratch::floats(static_cast<size_t>(g.floats), kGridSlot);
  float* out = Scratch::floats(static_cast<size_t>(blocks * kForwardOut * g.padded), kRowsSlot);
  fill_grid(s, g, x, n, grid);
  const int64_t kk = s.kernel_h * s.kernel_h;
  for (int64_t q0 = 0; q0 < g.padded; q0 += kPixelTile)
    for (int64_t c0 = 0; c0 < s.in_channels; c0 += f.channel_block) {
      const int64_t t0 = c0 * kk, t1 = std::min(s.in_channels, c0 + f.channel_block) * kk;
      for (int64_t b = 0; b < blocks; ++b)
        forward_tile<kForwardOut, kPixelVectors>(grid + q0, f.off.data() + t0, t1 - t0, f.wp + (b * T + t0) * kForwardOut,
                                               f.bias.empty() ? nullptr : f.bias.data() + b * kForwardOut, c0 > 0,
                                               out + b * kForwardOut * g.padded + q0, g.padded);
    }
  const int64_t O = s.out_channels, OH = s.out_h(), OW = s.out_w();
  float* ys = y + n * O * OH * OW;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t oh = 0; oh < OH; ++oh)
      std::memcpy(ys + (o * OH + oh) * OW, out + o * g.padded + oh * g.width, static_cast<size_t>(OW) * sizeof(float));
}

// Threads take whole samples when there are several threads and samples.
bool samples_in_parallel(const ConvShape& s) {
  return compute_threads() > 1 && !omp_in_parallel() && s.batch > 1;
}

// The weight gradient's per-call parameters and buffers.
struct ParamsPlan {
  ConvShape s;
  Grid g;
  std::vector<int32_t> off;
  int64_t rows = 0, taps = 0;  // channels and taps padded to whole blocks
  int64_t pixels = 0;          // output grid pixels rounded up to whole vectors
  int64_t dy_stride = 0;       // floats per sample of dy on the grid
  float *grids = nullptr, *dys = nullptr, *acc = nullptr;
};

// Sample n's input grid and dy on the output grid (zero in the extra
// columns, rows and channels), as its group's sample i.
void fill_sample(const ParamsPlan& f, const float* x, const float* dy, int64_t n, int64_t i) {
  const ConvShape& s = f.s;
  const int64_t O = s.out_channels, OH = s.out_h(), OW = s.out_w();
  fill_grid(s, f.g, x, n, f.grids + i * f.g.floats);
  float* rows = f.dys + i * f.dy_stride;
  std::fill(rows, rows + f.dy_stride, 0.0f);
  const float* dys = dy + n * O * OH * OW;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t oh = 0; oh < OH; ++oh)
      std::memcpy(rows + o * f.pixels + oh * f.g.width, dys + (o * OH + oh) * OW, static_cast<size_t>(OW) * sizeof(float));
}

constexpr int64_t kWeightStretch = 1024;

// The group's samples into output block b's accumulators, in stretches of
// pixels whose dy rows stay in L1 while every tap block reads them.
void params_block(const ParamsPlan& f, int64_t b, int64_t samples) {
  const int64_t tblocks = f.taps / kTapBlock;
  for (int64_t q0 = 0; q0 < f.pixels; q0 += kWeightStretch) {
    const int64_t len = std::min(kWeightStretch, f.pixels - q0);
    for (int64_t tb = 0; tb < tblocks; ++tb)
      weight_tile<kWeightOut, kTapBlock>(f.dys + b * kWeightOut * f.pixels + q0, f.pixels, f.dy_stride, f.grids + q0,
                                         f.g.floats, f.off.data() + tb * kTapBlock, len, samples,
                                         f.acc + (b * tblocks + tb) * kWeightOut * kTapBlock * 16);
  }
}

// dw[o][t] += the sum of (o, t)'s accumulator lanes.
PD_AVX512 void add_lane_sums(const ParamsPlan& f, float* dw) {
  const int64_t T = f.s.patch(), tblocks = f.taps / kTapBlock;
  for (int64_t o = 0; o < f.s.out_channels; ++o)
    for (int64_t t = 0; t < T; ++t) {
      const int64_t b = o / kWeightOut, i = o % kWeightOut, tb = t / kTapBlock, j = t % kTapBlock;
      const float* lanes = f.acc + ((b * tblocks + tb) * kWeightOut * kTapBlock + i * kTapBlock + j) * 16;
      dw[o * T + t] += _mm512_reduce_add_ps(_mm512_loadu_ps(lanes));
    }
}

// Samples per group: a group's grids stay in cache while every output
// block reads them. Fixed by the shape, so the sums' order is too.
constexpr int64_t kGroupFloats = int64_t{1} << 18;

}  // namespace

bool conv_direct_available() {
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return yes;
}

namespace {

// Measured on resnet18's convolutions at 64x64 and 224x224
// (bench/diag/conv_direct_split.cpp): the forward kernel beats im2col +
// sgemm up to 256 output channels on maps at least 14 wide (the grid's
// extra columns cost more on narrower ones); the weight gradient's only on
// few output channels and wide maps (the stem, the 64-channel stage at
// 224x224). Pointwise convolutions have no column matrix to save.
bool direct_pays(const ConvShape& s) {
  return conv_direct_available() && s.kernel_h > 1 && s.stride <= 2 && s.out_w() >= 14;
}

}  // namespace

bool conv_direct_forward_chosen(const ConvShape& s) { return direct_pays(s) && s.out_channels <= 256; }

bool conv_direct_params_chosen(const ConvShape& s) {
  return direct_pays(s) && s.out_channels <= 64 && s.out_w() >= 28;
}

void conv2d_direct_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  ForwardPlan f;
  f.s = s;
  f.g = grid_of(s);
  f.off = tap_offsets(s, f.g);
  f.channel_block = channel_block(s, f.g);
  const int64_t rows = round_up(s.out_channels, kForwardOut);
  float* wp = Scratch::floats(static_cast<size_t>(rows * s.patch()), kWeightsSlot);
  pack_weights(s, w, wp);
  f.wp = wp;
  if (bias) {
    f.bias.assign(static_cast<size_t>(rows), 0.0f);
    std::copy(bias, bias + s.out_channels, f.bias.begin());
  }
  if (!samples_in_parallel(s)) {
    for (int64_t n = 0; n < s.batch; ++n) forward_sample(f, x, n, y);
    return;
  }
#pragma omp parallel for schedule(dynamic, 1) num_threads(compute_threads())
  for (int64_t n = 0; n < s.batch; ++n) forward_sample(f, x, n, y);
}

void conv2d_direct_backward_params(const ConvShape& s, const float* x, const float* dy, float* dw) {
  ParamsPlan f;
  f.s = s;
  f.g = grid_of(s);
  f.off = tap_offsets(s, f.g);
  f.rows = round_up(s.out_channels, kWeightOut);
  f.taps = round_up(s.patch(), kTapBlock);
  f.pixels = round_up(f.g.pixels, 16);
  f.dy_stride = f.rows * f.pixels;
  const int64_t group = std::max<int64_t>(1, std::min(s.batch, kGroupFloats / (f.g.floats + f.dy_stride)));
  f.grids = Scratch::floats(static_cast<size_t>(group * f.g.floats), kGridSlot);
  f.dys = Scratch::floats(static_cast<size_t>(group * f.dy_stride), kRowsSlot);
  f.acc = Scratch::floats(static_cast<size_t>(f.rows * f.taps * 16), kSumsSlot);
  std::fill(f.acc, f.acc + f.rows * f.taps * 16, 0.0f);
  const int64_t blocks = f.rows / kWeightOut;
  // Threads split a group's samples to lay them out, then the output
  // blocks (never a block's sums).
  if (!samples_in_parallel(s)) {
    for (int64_t n0 = 0; n0 < s.batch; n0 += group) {
      const int64_t n1 = std::min(s.batch, n0 + group);
      for (int64_t n = n0; n < n1; ++n) fill_sample(f, x, dy, n, n - n0);
      for (int64_t b = 0; b < blocks; ++b) params_block(f, b, n1 - n0);
    }
  } else {
#pragma omp parallel num_threads(compute_threads())
    for (int64_t n0 = 0; n0 < s.batch; n0 += group) {
      const int64_t n1 = std::min(s.batch, n0 + group);
#pragma omp for schedule(static)
      for (int64_t n = n0; n < n1; ++n) fill_sample(f, x, dy, n, n - n0);
#pragma omp for schedule(dynamic, 1)
      for (int64_t b = 0; b < blocks; ++b) params_block(f, b, n1 - n0);
    }
  }
  add_lane_sums(f, dw);
}

}  // namespace pd::cpu
