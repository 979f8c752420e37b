#include "core/cpu/conv_direct_kernels.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "core/cpu/environment_switch.h"
#include "core/cpu/gemm.h"
#include "core/cpu/scratch.h"

// Only the functions marked so use AVX-512; they run only after
// conv_direct_available() said yes, so the binary still runs on AVX2 hosts.
#define PD_AVX512 __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma")))

namespace pd::cpu {

namespace {

// Scratch slots, all the calling thread's (its workers share them). Slot
// 2 holds the flipped kernel while conv_kernels.cpp computes dx through
// the forward kernel.
constexpr int kGridSlot = 0, kRowsSlot = 1, kWeightsSlot = 4, kSumsSlot = 5;

// A group of samples is laid out at once, as many as fit this many floats
// (1 MiB: their grids stay in L2 while every output block reads them).
// Fixed by the shape, so the order of every sum is too.
constexpr int64_t kGroupFloats = int64_t{1} << 18;

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// ---- The input grid ------------------------------------------------------

// One sample's input as stride^2 phase planes per channel: plane
// (c, py, px) row i, column j holds the padded input at row py + S*i,
// column px + S*j. Output pixel (oh, ow) sits at q = oh*width + ow of the
// output grid, and tap (c, ky, kx) reads plane (c, ky%S, kx%S) at
// q + (ky/S)*width + kx/S: one offset per tap.
struct Grid {
  int64_t S = 1, reach = 0, width = 0, rows = 0, plane = 0;
  int64_t pixels = 0;  // output grid pixels, OH * width
  int64_t vectors = 0; // pixels rounded up to whole vectors of 16
  int64_t floats = 0;  // the input grid, with slack for the last vector's reads
};

Grid grid_of(const ConvShape& s) {
  Grid g;
  g.S = s.stride;
  g.reach = (s.kernel_h - 1) / g.S;
  g.width = s.out_w() + g.reach;
  g.rows = s.out_h() + g.reach;
  g.plane = g.rows * g.width;
  g.pixels = s.out_h() * g.width;
  g.vectors = round_up(g.pixels, 16);
  g.floats = s.in_channels * g.S * g.S * g.plane + (g.vectors - g.pixels) + g.reach;
  return g;
}

// Grid offsets of the taps, in w's order (c, ky, kx), padded with zeros
// (a harmless read) to a multiple of `multiple` taps.
std::vector<int32_t> tap_offsets(const ConvShape& s, const Grid& g, int64_t multiple) {
  const int64_t k = s.kernel_h, S = g.S;
  std::vector<int32_t> off;
  off.reserve(static_cast<size_t>(round_up(s.patch(), multiple)));
  for (int64_t c = 0; c < s.in_channels; ++c)
    for (int64_t ky = 0; ky < k; ++ky)
      for (int64_t kx = 0; kx < k; ++kx)
        off.push_back(static_cast<int32_t>(((c * S + ky % S) * S + kx % S) * g.plane + (ky / S) * g.width + kx / S));
  off.resize(static_cast<size_t>(round_up(s.patch(), multiple)), 0);
  return off;
}

// Row i of plane (c, py, px) of sample xs's grid (see Grid).
void fill_grid_row(const ConvShape& s, const Grid& g, const float* xs, int64_t c, int64_t py, int64_t px, int64_t i,
                   float* dst) {
  const int64_t H = s.in_h, W = s.in_w, S = g.S, p = s.padding, r = py + S * i - p;
  // Columns j with 0 <= px + S*j - p < W.
  const int64_t j0 = std::min(g.width, std::max<int64_t>(0, (p - px + S - 1) / S));
  const int64_t j1 = std::max(j0, std::min(g.width, (W + p - px + S - 1) / S));
  if (r < 0 || r >= H || j0 == j1) {
    std::fill(dst, dst + g.width, 0.0f);
    return;
  }
  std::fill(dst, dst + j0, 0.0f);
  const float* src = xs + (c * H + r) * W + (px + S * j0 - p);
  if (S == 1)
    std::memcpy(dst + j0, src, static_cast<size_t>(j1 - j0) * sizeof(float));
  else
    for (int64_t j = j0; j < j1; ++j) dst[j] = src[(j - j0) * S];
  std::fill(dst + j1, dst + g.width, 0.0f);
}

// Sample n's grid. Padding and slack are zeros.
void fill_grid(const ConvShape& s, const Grid& g, const float* x, int64_t n, float* grid) {
  const float* xs = x + n * s.in_channels * s.in_h * s.in_w;
  float* dst = grid;
  for (int64_t c = 0; c < s.in_channels; ++c)
    for (int64_t py = 0; py < g.S; ++py)
      for (int64_t px = 0; px < g.S; ++px)
        for (int64_t i = 0; i < g.rows; ++i, dst += g.width) fill_grid_row(s, g, xs, c, py, px, i, dst);
  std::fill(dst, grid + g.floats, 0.0f);
}

// Threads split the work when there are several and we are not already
// inside a parallel region.
bool threaded() { return compute_threads() > 1 && !omp_in_parallel(); }

// The batch in groups of `group` samples: fill(n, i) lays sample n out as
// the group's i-th, then work(b, n0, n1) runs block b (of `blocks`, whose
// outputs are disjoint) over the group's samples [n0, n1). Threads split a
// group's samples, then its blocks, never one block: the same sums in the
// same order whatever the thread count.
template <class Fill, class Work>
void for_each_group(int64_t batch, int64_t group, int64_t blocks, Fill fill, Work work) {
  if (!threaded()) {
    for (int64_t n0 = 0; n0 < batch; n0 += group) {
      const int64_t n1 = std::min(batch, n0 + group);
      for (int64_t n = n0; n < n1; ++n) fill(n, n - n0);
      for (int64_t b = 0; b < blocks; ++b) work(b, n0, n1);
    }
    return;
  }
#pragma omp parallel num_threads(compute_threads())
  for (int64_t n0 = 0; n0 < batch; n0 += group) {
    const int64_t n1 = std::min(batch, n0 + group);
#pragma omp for schedule(static)
    for (int64_t n = n0; n < n1; ++n) fill(n, n - n0);
#pragma omp for schedule(dynamic, 1)
    for (int64_t b = 0; b < blocks; ++b) work(b, n0, n1);
  }
}

// ---- Forward: vectorised over output channels ----------------------------
// Each tap's weights for 16*OV output channels are OV aligned vectors; the
// input enters as broadcast scalars, NP consecutive pixels of one output
// row, whose grid addresses are consecutive too: no unaligned vector loads,
// and only real output pixels computed.

// Taps summed per register pass: each pass starts from zero and its sums
// are added to the tile's totals, so no running sum over thousands of taps
// (512 channels of 3x3) carries the rounding of all of them (the summation
// error grows with the terms per sum).
constexpr int64_t kTapPass = 256;

// y[o][p] (o < rows <= 16*OV, row stride ld) = bias[o] (or 0) + the sum
// over taps t of wq[t][o] * in[off[t] + p], for p < NP: in passes of
// kTapPass taps in order, each summed in order.
template <int OV, int NP>
PD_AVX512 void channel_tile(const float* in, const int32_t* off, int64_t taps, const float* wq, const float* bias,
                            float* y, int64_t ld, int64_t rows) {
  alignas(64) float total[NP][OV * 16];
  for (int v = 0; v < OV; ++v) {
    const __m512 b = bias ? _mm512_loadu_ps(bias + 16 * v) : _mm512_setzero_ps();
    for (int p = 0; p < NP; ++p) _mm512_store_ps(&total[p][16 * v], b);
  }
  for (int64_t t0 = 0; t0 < taps; t0 += kTapPass) {
    __m512 acc[NP][OV];
    for (int p = 0; p < NP; ++p)
      for (int v = 0; v < OV; ++v) acc[p][v] = _mm512_setzero_ps();
    for (int64_t t = t0; t < std::min(taps, t0 + kTapPass); ++t) {
      const float* src = in + off[t];
      const float* wt = wq + t * OV * 16;
      __m512 wv[OV];
      for (int v = 0; v < OV; ++v) wv[v] = _mm512_load_ps(wt + 16 * v);
      for (int p = 0; p < NP; ++p) {
        const __m512 xb = _mm512_set1_ps(src[p]);
        for (int v = 0; v < OV; ++v) acc[p][v] = _mm512_fmadd_ps(wv[v], xb, acc[p][v]);
      }
    }
    for (int p = 0; p < NP; ++p)
      for (int v = 0; v < OV; ++v)
        _mm512_store_ps(&total[p][16 * v], _mm512_add_ps(_mm512_load_ps(&total[p][16 * v]), acc[p][v]));
  }
  // A pixel's channels are its vectors' lanes; in y they are rows apart.
  for (int64_t o = 0; o < rows; ++o)
    for (int p = 0; p < NP; ++p) y[o * ld + p] = total[p][o];
}

using ChannelTile = void (*)(const float*, const int32_t*, int64_t, const float*, const float*, float*, int64_t,
                             int64_t);
// Accumulators per tile, of the 32 vector registers (the rest hold the
// weights and a broadcast pixel).
constexpr int kTileAccumulators = 24;

template <int OV, size_t... I>
constexpr std::array<ChannelTile, sizeof...(I)> channel_tiles(std::index_sequence<I...>) {
  return {&channel_tile<OV, static_cast<int>(I) + 1>...};
}
// Every tile shape: OV 1..4 vectors of channels, NP 1..24/OV pixels.
const std::array<ChannelTile, 24> kTiles1 = channel_tiles<1>(std::make_index_sequence<24>());
const std::array<ChannelTile, 12> kTiles2 = channel_tiles<2>(std::make_index_sequence<12>());
const std::array<ChannelTile, 8> kTiles3 = channel_tiles<3>(std::make_index_sequence<8>());
const std::array<ChannelTile, 6> kTiles4 = channel_tiles<4>(std::make_index_sequence<6>());

ChannelTile channel_tile_for(int ov, int64_t np) {
  const auto i = static_cast<size_t>(np - 1);
  switch (ov) {
    case 1: return kTiles1[i];
    case 2: return kTiles2[i];
    case 3: return kTiles3[i];
    default: return kTiles4[i];
  }
}

// Tiles per output row: the row cut into equal tiles of at most max pixels.
int64_t tiles_per_row(int64_t width, int64_t max) { return (width + max - 1) / max; }

// Vectors of output channels per tile: the choice that wastes least on
// padding the channels to whole vectors and on tiles short of
// 24 accumulators. One vector (24 pixels) is discounted: it loads a
// broadcast per multiply-add.
int channel_vectors(const ConvShape& s) {
  int best = 1;
  double best_use = 0;
  for (int ov = 1; ov <= 4; ++ov) {
    const int64_t max = kTileAccumulators / ov, tiles = tiles_per_row(s.out_w(), max);
    const double channels = double(s.out_channels) / double(round_up(s.out_channels, 16 * ov));
    const double pixels = double(s.out_w()) / double(tiles * max);
    const double use = channels * pixels * (ov == 1 ? 0.8 : 1.0);
    if (use > best_use + 1e-9) best_use = use, best = ov;
  }
  return best;
}

struct ForwardPlan {
  ConvShape s;
  Grid g;
  std::vector<int32_t> off;
  int ov = 2;
  int64_t rows = 0;  // output channels padded to whole blocks of 16*ov
  const float* wq = nullptr;
  std::vector<float> bias;  // padded; empty without bias
  float* grids = nullptr;
};

// wq[b][t][j] = w[b*16*ov + j][t], zero past the last channel.
void pack_weights(const ForwardPlan& f, const float* w, float* wq) {
  const int64_t O = f.s.out_channels, T = f.s.patch(), block = 16 * f.ov, blocks = f.rows / block;
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < block; ++j) {
        const int64_t o = b * block + j;
        wq[(b * T + t) * block + j] = o < O ? w[o * T + t] : 0.0f;
      }
}

// Output block b (16*ov channels) of the group's samples [n0, n1).
void forward_block(const ForwardPlan& f, int64_t b, int64_t n0, int64_t n1, float* y) {
  const ConvShape& s = f.s;
  const int64_t O = s.out_channels, OH = s.out_h(), OW = s.out_w(), P = OH * OW, T = s.patch();
  const int64_t block = 16 * f.ov, rows = std::min(block, O - b * block);
  const int64_t tiles = tiles_per_row(OW, kTileAccumulators / f.ov);
  const float* wq = f.wq + b * T * block;
  const float* bias = f.bias.empty() ? nullptr : f.bias.data() + b * block;
  for (int64_t n = n0; n < n1; ++n) {
    const float* grid = f.grids + (n - n0) * f.g.floats;
    float* yb = y + (n * O + b * block) * P;
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t i = 0, ow = 0; i < tiles; ++i) {
        const int64_t np = OW / tiles + (i < OW % tiles ? 1 : 0);
        channel_tile_for(f.ov, np)(grid + oh * f.g.width + ow, f.off.data(), T, wq, bias, yb + oh * OW + ow, P, rows);
        ow += np;
      }
  }
}

// ---- Weight gradient: vectorised over pixels -----------------------------

// Register tile: kWeightOut output channels x kTapBlock taps, fed per 16
// pixels by kWeightOut + kTapBlock loads.
constexpr int kWeightOut = 4, kTapBlock = 6;

// acc[i][j] (16 lanes each, OB x TB contiguous) += the sum over the
// samples and over q < pixels of dy[i][q] * grid[off[j] + q], in lane
// q % 16 (pixels a multiple of 16; dy is zero outside the output). Summed
// per lane in sample and pixel order, across lanes only at the end.
template <int OB, int TB>
PD_AVX512 void weight_tile(const float* dy, int64_t ld, int64_t dy_stride, const float* grid, int64_t grid_stride,
                           const int32_t* off, int64_t pixels, int64_t samples, float* acc_io) {
  __m512 acc[OB][TB];
  for (int i = 0; i < OB; ++i)
    for (int j = 0; j < TB; ++j) acc[i][j] = _mm512_setzero_ps();
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
    for (int j = 0; j < TB; ++j) {
      float* a = acc_io + (i * TB + j) * 16;
      _mm512_storeu_ps(a, _mm512_add_ps(_mm512_loadu_ps(a), acc[i][j]));
    }
}

struct ParamsPlan {
  ConvShape s;
  Grid g;
  std::vector<int32_t> off;
  int64_t rows = 0, taps = 0;  // channels and taps padded to whole blocks
  int64_t dy_stride = 0;       // floats per sample of dy on the grid
  float *grids = nullptr, *dys = nullptr, *acc = nullptr;
};

// Sample n's input grid and dy on the output grid (zero in the extra
// columns, rows and channels), as its group's sample i.
void fill_sample(const ParamsPlan& f, const float* x, const float* dy, int64_t n, int64_t i) {
  const ConvShape& s = f.s;
  const int64_t O = s.out_channels, OH = s.out_h(), OW = s.out_w(), ld = f.g.vectors;
  fill_grid(s, f.g, x, n, f.grids + i * f.g.floats);
  float* rows = f.dys + i * f.dy_stride;
  std::fill(rows, rows + f.dy_stride, 0.0f);
  const float* dys = dy + n * O * OH * OW;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t oh = 0; oh < OH; ++oh)
      std::memcpy(rows + o * ld + oh * f.g.width, dys + (o * OH + oh) * OW, static_cast<size_t>(OW) * sizeof(float));
}

// Pixels per stretch: a block's dy rows over a stretch stay in L1 while
// every tap block reads them.
constexpr int64_t kWeightStretch = 1024;

// The group's samples into output block b's accumulators.
void params_block(const ParamsPlan& f, int64_t b, int64_t samples) {
  const int64_t tblocks = f.taps / kTapBlock, ld = f.g.vectors;
  for (int64_t q0 = 0; q0 < ld; q0 += kWeightStretch) {
    const int64_t len = std::min(kWeightStretch, ld - q0);
    for (int64_t tb = 0; tb < tblocks; ++tb)
      weight_tile<kWeightOut, kTapBlock>(f.dys + b * kWeightOut * ld + q0, ld, f.dy_stride, f.grids + q0, f.g.floats,
                                         f.off.data() + tb * kTapBlock, len, samples,
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

// ---- Weight gradient of 3x3 stride-1 convolutions: vectorised over output
// channels ---------------------------------------------------------------
// The forward kernel's layout turned around: dy enters as vectors of 32
// output channels per pixel (dy transposed, [pixel][channel]), the input as
// broadcast scalars of one channel's 9 taps, and the 18 accumulators are
// dw's entries themselves: no pixel lanes to reduce, no grid columns.

constexpr int kGradTaps = 9, kGradChannels = 32;

// acc[t][o] (t < 9, o < 32) += the sum over the group's samples (grids and
// dyt `grid_stride` and `dyt_stride` apart) and over output rows
// [oh0, oh1) and columns of dyt[pixel][o] * grid[pixel's tap t], in that
// order.
PD_AVX512 void grad_tile(const float* grid, int64_t grid_stride, int64_t width, const float* dyt,
                         int64_t dyt_stride, int64_t ld, int64_t samples, int64_t oh0, int64_t oh1, int64_t OW,
                         float* acc_io) {
  __m512 acc[kGradTaps][2];
  for (int t = 0; t < kGradTaps; ++t)
    for (int v = 0; v < 2; ++v) acc[t][v] = _mm512_setzero_ps();
  for (int64_t n = 0; n < samples; ++n)
    for (int64_t oh = oh0; oh < oh1; ++oh) {
      const float* r0 = grid + n * grid_stride + oh * width;
      const float* r1 = r0 + width;
      const float* r2 = r1 + width;
      const float* d = dyt + n * dyt_stride + oh * OW * ld;
      for (int64_t ow = 0; ow < OW; ++ow) {
        const __m512 d0 = _mm512_loadu_ps(d + ow * ld), d1 = _mm512_loadu_ps(d + ow * ld + 16);
        const float* rows[3] = {r0 + ow, r1 + ow, r2 + ow};
        for (int ky = 0; ky < 3; ++ky)
          for (int kx = 0; kx < 3; ++kx) {
            const __m512 xb = _mm512_set1_ps(rows[ky][kx]);
            acc[ky * 3 + kx][0] = _mm512_fmadd_ps(d0, xb, acc[ky * 3 + kx][0]);
            acc[ky * 3 + kx][1] = _mm512_fmadd_ps(d1, xb, acc[ky * 3 + kx][1]);
          }
      }
    }
  for (int t = 0; t < kGradTaps; ++t)
    for (int v = 0; v < 2; ++v) {
      float* a = acc_io + (t * 2 + v) * 16;
      _mm512_storeu_ps(a, _mm512_add_ps(_mm512_loadu_ps(a), acc[t][v]));
    }
}

struct GradPlan {
  ConvShape s;
  Grid g;
  int64_t rows = 0;        // output channels padded to whole blocks of 32
  int64_t dyt_stride = 0;  // floats per sample of dy transposed
  int64_t stretch = 1;     // output rows per pass over the input channels
  float *grids = nullptr, *dyts = nullptr, *acc = nullptr;
};

// Sample n's grid and dy transposed ([pixel][channel], zero past the last
// channel), as its group's sample i.
void fill_grad_sample(const GradPlan& f, const float* x, const float* dy, int64_t n, int64_t i) {
  const ConvShape& s = f.s;
  const int64_t O = s.out_channels, P = s.out_h() * s.out_w(), ld = f.rows;
  fill_grid(s, f.g, x, n, f.grids + i * f.g.floats);
  float* dst = f.dyts + i * f.dyt_stride;
  const float* src = dy + n * O * P;
  constexpr int64_t kPixels = 16;  // a block of pixels per pass over the channels, for the writes' sake
  for (int64_t p0 = 0; p0 < P; p0 += kPixels) {
    const int64_t p1 = std::min(P, p0 + kPixels);
    for (int64_t o = 0; o < O; ++o)
      for (int64_t p = p0; p < p1; ++p) dst[p * ld + o] = src[o * P + p];
    for (int64_t p = p0; p < p1; ++p) std::fill(dst + p * ld + O, dst + (p + 1) * ld, 0.0f);
  }
}

// Input channel c's accumulators (every output block) over the group.
void grad_channel(const GradPlan& f, int64_t c, int64_t samples) {
  const ConvShape& s = f.s;
  const int64_t OH = s.out_h(), OW = s.out_w(), blocks = f.rows / kGradChannels;
  const float* grid = f.grids + c * f.g.plane;
  for (int64_t oh0 = 0; oh0 < OH; oh0 += f.stretch)
    for (int64_t b = 0; b < blocks; ++b)
      grad_tile(grid, f.g.floats, f.g.width, f.dyts + b * kGradChannels, f.dyt_stride, f.rows, samples, oh0,
                std::min(OH, oh0 + f.stretch), OW, f.acc + (c * blocks + b) * kGradTaps * kGradChannels);
}

// dw[o][c*9 + t] += acc[c][o / 32][t][o % 32].
void add_grad_sums(const GradPlan& f, float* dw) {
  const int64_t O = f.s.out_channels, C = f.s.in_channels, blocks = f.rows / kGradChannels;
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t t = 0; t < kGradTaps; ++t)
        dw[(o * C + c) * kGradTaps + t] +=
            f.acc[((c * blocks + o / kGradChannels) * kGradTaps + t) * kGradChannels + o % kGradChannels];
}

// Output pixels' dy rows per pass over the input channels: 32 KiB, which
// stay in L1 while every channel reads them.
constexpr int64_t kGradStretchBytes = 32 << 10;

void weight_gradient_3x3(const ConvShape& s, const float* x, const float* dy, float* dw) {
  GradPlan f;
  f.s = s;
  f.g = grid_of(s);
  f.rows = round_up(s.out_channels, kGradChannels);
  f.dyt_stride = s.out_h() * s.out_w() * f.rows;
  f.stretch = std::max<int64_t>(1, kGradStretchBytes / (s.out_w() * kGradChannels * int64_t{sizeof(float)}));
  const int64_t group = std::clamp<int64_t>(kGroupFloats / (f.g.floats + f.dyt_stride), 1, s.batch);
  if (group > 1) f.stretch = s.out_h();
  f.grids = Scratch::floats(static_cast<size_t>(group * f.g.floats), kGridSlot);
  f.dyts = Scratch::floats(static_cast<size_t>(group * f.dyt_stride), kRowsSlot);
  const int64_t acc_floats = s.in_channels * f.rows * kGradTaps;
  f.acc = Scratch::floats(static_cast<size_t>(acc_floats), kSumsSlot);
  std::fill(f.acc, f.acc + acc_floats, 0.0f);
  // Blocks: the input channels.
  for_each_group(
      s.batch, group, s.in_channels, [&](int64_t n, int64_t i) { fill_grad_sample(f, x, dy, n, i); },
      [&](int64_t c, int64_t n0, int64_t n1) { grad_channel(f, c, n1 - n0); });
  add_grad_sums(f, dw);
}

// Fewer output channels would leave most of the 32 lanes idle.
bool grad_3x3(const ConvShape& s) { return s.kernel_h == 3 && s.stride == 1 && s.out_channels >= 16; }

// ---- When ------------------------------------------------------------------

// Measured on resnet18's convolutions at 64x64 and 224x224, batch 32 and 8
// (bench/diag/conv_direct_split.cpp), and on narrow layers (MobileNet's
// depthwise ones, the cnn's 1->32 5x5). Pointwise convolutions have no
// column matrix to save; maps narrower than 4 fill too few pixels per
// tile; the grid's offsets are 32-bit.
bool direct_pays(const ConvShape& s) {
  return conv_direct_available() && s.kernel_h > 1 && s.stride <= 2 && s.out_w() >= 4 &&
         grid_of(s).floats <= std::numeric_limits<int32_t>::max() / 2;
}

}  // namespace

bool conv_direct_available() {
  // PIPEDREAM_DIRECT_CONV=0 runs what an AVX2-only host runs (im2col):
  // another summation order, to tell a rounding-decided difference (a
  // flipped ReLU moves with the order) from an error (it does not).
  static const bool yes = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
                          environment_switch_on("PIPEDREAM_DIRECT_CONV");
  return yes;
}

// The forward kernel's vectors hold 16 output channels, and each tile's
// sums are turned to rows of y: fewer channels or taps (a 1->32 5x5 layer)
// leave im2col faster.
bool conv_direct_forward_chosen(const ConvShape& s) {
  return direct_pays(s) && s.out_channels >= 16 && s.patch() >= 32;
}

// The 3x3 weight gradient beats im2col + sgemm on maps at least 8 wide
// (resnet18's stages from 16 up to 256 channels), the general one on few
// output channels and wide maps only (the stem).
bool conv_direct_params_chosen(const ConvShape& s) {
  if (!direct_pays(s)) return false;
  return grad_3x3(s) ? s.out_w() >= 8 : s.out_channels <= 64 && s.out_w() >= 28;
}

void conv2d_direct_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  ForwardPlan f;
  f.s = s;
  f.g = grid_of(s);
  f.off = tap_offsets(s, f.g, 1);
  f.ov = channel_vectors(s);
  f.rows = round_up(s.out_channels, 16 * f.ov);
  float* wq = Scratch::floats(static_cast<size_t>(f.rows * s.patch()), kWeightsSlot);
  pack_weights(f, w, wq);
  f.wq = wq;
  if (bias) {
    f.bias.assign(static_cast<size_t>(f.rows), 0.0f);
    std::copy(bias, bias + s.out_channels, f.bias.begin());
  }
  const int64_t group = std::clamp<int64_t>(kGroupFloats / f.g.floats, 1, s.batch);
  f.grids = Scratch::floats(static_cast<size_t>(group * f.g.floats), kGridSlot);
  for_each_group(
      s.batch, group, f.rows / (16 * f.ov),
      [&](int64_t n, int64_t i) { fill_grid(s, f.g, x, n, f.grids + i * f.g.floats); },
      [&](int64_t b, int64_t n0, int64_t n1) { forward_block(f, b, n0, n1, y); });
}

void conv2d_direct_backward_params(const ConvShape& s, const float* x, const float* dy, float* dw) {
  if (grad_3x3(s)) return weight_gradient_3x3(s, x, dy, dw);
  ParamsPlan f;
  f.s = s;
  f.g = grid_of(s);
  f.off = tap_offsets(s, f.g, kTapBlock);
  f.rows = round_up(s.out_channels, kWeightOut);
  f.taps = round_up(s.patch(), kTapBlock);
  f.dy_stride = f.rows * f.g.vectors;
  const int64_t group = std::clamp<int64_t>(kGroupFloats / (f.g.floats + f.dy_stride), 1, s.batch);
  f.grids = Scratch::floats(static_cast<size_t>(group * f.g.floats), kGridSlot);
  f.dys = Scratch::floats(static_cast<size_t>(group * f.dy_stride), kRowsSlot);
  f.acc = Scratch::floats(static_cast<size_t>(f.rows * f.taps * 16), kSumsSlot);
  std::fill(f.acc, f.acc + f.rows * f.taps * 16, 0.0f);
  for_each_group(
      s.batch, group, f.rows / kWeightOut, [&](int64_t n, int64_t i) { fill_sample(f, x, dy, n, i); },
      [&](int64_t b, int64_t n0, int64_t n1) { params_block(f, b, n1 - n0); });
  add_lane_sums(f, dw);
}

}  // namespace pd::cpu
