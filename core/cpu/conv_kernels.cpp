#include "core/cpu/conv_kernels.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include <omp.h>

#include "core/cpu/fast_math.h"
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
// Convolutions with fewer multiply-adds run their chunks on one thread.
constexpr int64_t kParallelMinMnk = int64_t{1} << 20;
// Weight-gradient partial sums per thread in a threaded backward pass.
constexpr int64_t kRunsPerThread = 4;

// Scratch slots: conv2d_backward computes dx with conv2d_forward, which
// uses kColumns and kOutput, so the flipped weights live in their own slot.
constexpr int kColumns = 0, kOutput = 1, kFlippedWeights = 2, kWeightGradient = 3;

// 1x1 stride-1 unpadded: a sample's column matrix is the sample itself.
bool pointwise(const ConvShape& s) { return s.kernel == 1 && s.stride == 1 && s.padding == 0; }

// Rows [O] of a [O, cols] matrix (row stride ld) set to bias[o]: the
// GEMM then accumulates onto them (beta = 1), which spares it a pass that
// zeroes C and us a pass that adds the bias.
void fill_rows_with_bias(int64_t O, int64_t cols, int64_t ld, const float* bias, float* c) {
  parallel_ranges(O, O * cols, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) std::fill(c + o * ld, c + o * ld + cols, bias[o]);
  });
}

// The input gradient of a stride-1 convolution is itself a stride-1
// convolution: of dy, zero-padded by k-1-p, with the kernel flipped in
// both spatial axes and its two channel axes swapped. Computing it that
// way writes dx once, where the im2col route writes and re-reads a
// [C*k*k, n*P] column matrix and folds it back (col2im).
bool input_gradient_as_convolution(const ConvShape& s) {
  return s.stride == 1 && s.padding <= s.kernel - 1 && !pointwise(s);
}

ConvShape transposed_shape(const ConvShape& s) {
  ConvShape t;
  t.batch = s.batch;
  t.in_channels = s.out_channels;
  t.height = s.out_height();
  t.width = s.out_width();
  t.out_channels = s.in_channels;
  t.kernel = s.kernel;
  t.stride = 1;
  t.padding = s.kernel - 1 - s.padding;
  return t;
}

// wf[c, o, a, b] = w[o, c, k-1-a, k-1-b].
void flip_kernel(const ConvShape& s, const float* w, float* wf) {
  const int64_t O = s.out_channels, C = s.in_channels, kk = int64_t{s.kernel} * s.kernel;
  for (int64_t c = 0; c < C; ++c)
    for (int64_t o = 0; o < O; ++o) {
      const float* src = w + (o * C + c) * kk;
      float* dst = wf + (c * O + o) * kk;
      for (int64_t i = 0; i < kk; ++i) dst[i] = src[kk - 1 - i];
    }
}

// n floats from src to dst. Rows here are short (4 to 256 floats), where a
// memmove call costs more than the copy; the vector type keeps GCC from
// turning the loop back into one.
inline void copy_row(const float* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f32x8 v;
    std::memcpy(&v, src + i, sizeof v);
    std::memcpy(dst + i, &v, sizeof v);
  }
  for (; i < n; ++i) dst[i] = src[i];
}

// dbias[o] += sum of dy over samples and pixels: 8 lanes per sample
// (vectorised), lanes and tails summed per sample in double.
void bias_gradient(const ConvShape& s, const float* dy, float* dbias) {
  const int64_t O = s.out_channels, P = s.out_height() * s.out_width(), N = s.batch;
#pragma omp parallel for schedule(static) if (N * O * P >= kParallelMinElements)
  for (int64_t o = 0; o < O; ++o) {
    double acc = 0;
    for (int64_t i = 0; i < N; ++i) {
      const float* g = dy + (i * O + o) * P;
      f32x8 lanes = splat8(0.0f);
      int64_t p = 0;
      for (; p + 8 <= P; p += 8) {
        f32x8 v;
        std::memcpy(&v, g + p, sizeof v);
        lanes += v;
      }
      float part = 0;
      for (; p < P; ++p) part += g[p];
      for (int j = 0; j < 8; ++j) acc += lanes[j];
      acc += part;
    }
    dbias[o] += static_cast<float>(acc);
  }
}

// dy rows of samples [first, first + n) as [O, n*P], the layout of the
// forward GEMM's output (dst, row stride n*P).
void gather_output_rows(const ConvShape& s, const float* dy, int64_t first, int64_t n, float* dst) {
  const int64_t O = s.out_channels, P = s.out_height() * s.out_width(), ld = n * P;
  parallel_ranges(O, n * O * P, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t i = 0; i < n; ++i) copy_row(dy + ((first + i) * O + o) * P, P, dst + o * ld + i * P);
  });
}

// Maps with fewer pixels than the kernel has taps (VGG's 2x2 maps under a
// 3x3 kernel) waste most of an im2col GEMM on zero padding: there the
// layer is run as the dense matrix it is, Wd [O*P, C*H*W], which skips
// the padding's multiply-adds (4/9 of them for 2x2 maps with a 3x3
// kernel) and needs no im2col. Per sample NCHW is already the row layout.
constexpr int64_t kMaxDenseWeightFloats = int64_t{1} << 22;

bool dense_is_cheaper(const ConvShape& s) {
  const int64_t HW = s.height * s.width, P = s.out_height() * s.out_width();
  return HW < int64_t{s.kernel} * s.kernel && s.out_channels * P * s.in_channels * HW <= kMaxDenseWeightFloats;
}

// The (output pixel p, input pixel q, kernel tap ki*k + kj) triples where
// the kernel lands inside the image: the same for every channel pair.
struct Tap {
  int32_t p, q, t;
};
std::vector<Tap> taps_inside(const ConvShape& s) {
  std::vector<Tap> taps;
  const int64_t OH = s.out_height(), OW = s.out_width(), k = s.kernel;
  for (int64_t oh = 0; oh < OH; ++oh)
    for (int64_t ow = 0; ow < OW; ++ow)
      for (int64_t ki = 0; ki < k; ++ki) {
        const int64_t ih = oh * s.stride - s.padding + ki;
        if (ih < 0 || ih >= s.height) continue;
        for (int64_t kj = 0; kj < k; ++kj) {
          const int64_t iw = ow * s.stride - s.padding + kj;
          if (iw >= 0 && iw < s.width)
            taps.push_back({static_cast<int32_t>(oh * OW + ow), static_cast<int32_t>(ih * s.width + iw),
                            static_cast<int32_t>(ki * k + kj)});
        }
      }
  return taps;
}

// Wd's block for channels (o, c) is [P, HW] at wd + o*P*cols + c*HW.
void dense_weights(const ConvShape& s, const std::vector<Tap>& taps, const float* w, float* wd) {
  const int64_t P = s.out_height() * s.out_width(), HW = s.height * s.width, C = s.in_channels;
  const int64_t cols = C * HW, kk = int64_t{s.kernel} * s.kernel;
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
  const int64_t P = s.out_height() * s.out_width(), HW = s.height * s.width, C = s.in_channels;
  const int64_t cols = C * HW, kk = int64_t{s.kernel} * s.kernel;
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

void dense_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  const int64_t P = s.out_height() * s.out_width(), rows = s.out_channels * P;
  const int64_t cols = s.in_channels * s.height * s.width;
  float* wd = Scratch::floats(static_cast<size_t>(rows * cols), kColumns);
  dense_weights(s, taps_inside(s), w, wd);
  if (bias)
    for (int64_t i = 0; i < s.batch; ++i)
      for (int64_t o = 0; o < s.out_channels; ++o) std::fill_n(y + i * rows + o * P, P, bias[o]);
  gemm(false, true, s.batch, rows, cols, 1.0f, x, cols, wd, cols, bias ? 1.0f : 0.0f, y, rows);
}

void dense_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw) {
  const int64_t P = s.out_height() * s.out_width(), rows = s.out_channels * P;
  const int64_t cols = s.in_channels * s.height * s.width;
  const std::vector<Tap> taps = taps_inside(s);
  float* wd = Scratch::floats(static_cast<size_t>(rows * cols), kColumns);
  if (dx) {
    dense_weights(s, taps, w, wd);
    gemm(false, false, s.batch, cols, rows, 1.0f, dy, rows, wd, cols, 0.0f, dx, cols);
  }
  // dWd = dy^T x, then each weight collects the entries it was copied to.
  gemm(true, false, rows, cols, s.batch, 1.0f, dy, rows, x, cols, 0.0f, wd, cols);
  fold_dense_weights(s, taps, wd, dw);
}

}  // namespace

int64_t conv_chunk_samples(const ConvShape& s) {
  const int64_t P = std::max<int64_t>(s.out_height() * s.out_width(), 1);
  const int64_t wanted = (kMinColumns + P - 1) / P;
  const int64_t fit = std::max<int64_t>(1, kMaxColumnFloats / (s.patch() * P));
  return std::max<int64_t>(1, std::min({wanted, fit, s.batch}));
}

namespace {

// How the batch is cut into chunks and whether threads take whole chunks.
// With several threads, one parallel region per call in which each thread
// runs its chunks' im2col and single-threaded GEMMs beats a parallel region
// (or GEMM fork/join) per step of every chunk: far fewer hand-offs between
// threads, each of which can cost a scheduler time slice on a busy machine.
struct Chunking {
  int64_t size = 1, count = 1;
  bool parallel = false;
};

Chunking chunking(const ConvShape& s) {
  Chunking c;
  c.size = conv_chunk_samples(s);
  const int threads = compute_threads();
  const int64_t mnk = s.out_channels * s.patch() * s.batch * s.out_height() * s.out_width();
  c.parallel = threads > 1 && !omp_in_parallel() && s.batch >= threads && mnk >= kParallelMinMnk;
  if (c.parallel) {
    // A multiple of the thread count, so that static scheduling balances.
    int64_t count = (s.batch + c.size - 1) / c.size;
    count = (count + threads - 1) / threads * threads;
    c.size = (s.batch + count - 1) / count;
  }
  c.count = (s.batch + c.size - 1) / c.size;
  return c;
}

// body(first, n) for every chunk: in order on the calling thread, or
// spread over the threads (bodies must write disjoint outputs).
template <class Body>
void for_each_chunk(const ConvShape& s, const Chunking& c, Body body) {
  auto run = [&](int64_t k) { body(k * c.size, std::min(c.size, s.batch - k * c.size)); };
  if (!c.parallel) {
    for (int64_t k = 0; k < c.count; ++k) run(k);
    return;
  }
  // Dynamic: on a busy machine a thread that the scheduler starts late
  // finds its chunks done by the others instead of holding up the call.
#pragma omp parallel for schedule(dynamic, 1) num_threads(compute_threads())
  for (int64_t k = 0; k < c.count; ++k) run(k);
}

// One chunk of the forward pass; col and out are the calling thread's
// scratch, sized for chunk_size samples.
void forward_chunk(const ConvShape& s, const float* x, const float* w, const float* bias, float* y, int64_t first,
                   int64_t n, int64_t chunk_size) {
  const int64_t O = s.out_channels, K = s.patch(), P = s.out_height() * s.out_width(), ld = n * P;
  const float* cols = x + first * s.in_channels * s.height * s.width;
  if (!(n == 1 && pointwise(s))) {
    float* col = Scratch::floats(static_cast<size_t>(K * chunk_size * P), kColumns);
    im2col(s, x, first, n, col);
    cols = col;
  }
  float* dst = n == 1 ? y + first * O * P : Scratch::floats(static_cast<size_t>(O * chunk_size * P), kOutput);
  if (bias) fill_rows_with_bias(O, ld, ld, bias, dst);
  gemm(false, false, O, ld, K, 1.0f, w, K, cols, ld, bias ? 1.0f : 0.0f, dst, ld);
  if (n == 1) return;
  // [O, n*P] -> [n, O, P].
  parallel_ranges(n, n * O * P, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      for (int64_t o = 0; o < O; ++o) copy_row(dst + o * ld + i * P, P, y + ((first + i) * O + o) * P);
  });
}

// dw [O, K] += g [O, L] * cols [K, L]^T for weight gradients with few
// entries (a first layer: 1 or 3 input channels), as blocks of dot
// products read straight from the rows. OpenBLAS would pack both operands
// to produce a few hundred outputs, which halved its speed on them.
constexpr int64_t kSmallWeightGradient = 2048;

// Accumulators as named vectors, not an array (which GCC keeps on the stack).
template <int NO, int NR>
void row_dot_block(const float* g, const float* cols, int64_t ld, int64_t L, int64_t K, float* dw) {
  static_assert(NO >= 1 && NO <= 2 && NR >= 1 && NR <= 4);
  f32x8 c00 = splat8(0.0f), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00;
  const float* g1 = g + (NO > 1 ? ld : 0);
  int64_t j = 0;
  for (; j + 8 <= L; j += 8) {
    f32x8 a0, a1, b0, b1, b2, b3;
    std::memcpy(&a0, g + j, sizeof a0);
    std::memcpy(&b0, cols + j, sizeof b0);
    c00 += a0 * b0;
    if constexpr (NR > 1) {
      std::memcpy(&b1, cols + ld + j, sizeof b1);
      c01 += a0 * b1;
    }
    if constexpr (NR > 2) {
      std::memcpy(&b2, cols + 2 * ld + j, sizeof b2);
      c02 += a0 * b2;
    }
    if constexpr (NR > 3) {
      std::memcpy(&b3, cols + 3 * ld + j, sizeof b3);
      c03 += a0 * b3;
    }
    if constexpr (NO > 1) {
      std::memcpy(&a1, g1 + j, sizeof a1);
      c10 += a1 * b0;
      if constexpr (NR > 1) c11 += a1 * b1;
      if constexpr (NR > 2) c12 += a1 * b2;
      if constexpr (NR > 3) c13 += a1 * b3;
    }
  }
  const f32x8 acc[2][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}};
  for (int i = 0; i < NO; ++i)
    for (int r = 0; r < NR; ++r) {
      float sum = 0;
      for (int l = 0; l < 8; ++l) sum += acc[i][r][l];
      for (int64_t t = j; t < L; ++t) sum += g[i * ld + t] * cols[r * ld + t];
      dw[i * K + r] += sum;
    }
}

template <int NO>
void row_dot_rows(const float* g, const float* cols, int64_t ld, int64_t L, int64_t K, float* dw) {
  int64_t r = 0;
  for (; r + 4 <= K; r += 4) row_dot_block<NO, 4>(g, cols + r * ld, ld, L, K, dw + r);
  switch (K - r) {
    case 3: return row_dot_block<NO, 3>(g, cols + r * ld, ld, L, K, dw + r);
    case 2: return row_dot_block<NO, 2>(g, cols + r * ld, ld, L, K, dw + r);
    case 1: return row_dot_block<NO, 1>(g, cols + r * ld, ld, L, K, dw + r);
    default: return;
  }
}

void small_weight_gradient(int64_t O, int64_t K, int64_t L, const float* g, const float* cols, int64_t ld, float* dw) {
  int64_t o = 0;
  for (; o + 2 <= O; o += 2) row_dot_rows<2>(g + o * ld, cols, ld, L, K, dw + o * K);
  if (o < O) row_dot_rows<1>(g + o * ld, cols, ld, L, K, dw + o * K);
}

// One chunk of the backward pass: dw += this chunk's weight gradient and,
// when dx is not null, dx's samples [first, first + n) by im2col's transpose.
void backward_chunk(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                    int64_t first, int64_t n, int64_t chunk_size) {
  const int64_t O = s.out_channels, K = s.patch(), P = s.out_height() * s.out_width(), ld = n * P;
  const int64_t in_plane = s.in_channels * s.height * s.width;
  const float* g = dy + first * O * P;
  if (n > 1) {
    float* dyt = Scratch::floats(static_cast<size_t>(O * chunk_size * P), kOutput);
    gather_output_rows(s, dy, first, n, dyt);
    g = dyt;
  }
  const bool direct = n == 1 && pointwise(s);
  float* col = direct ? nullptr : Scratch::floats(static_cast<size_t>(K * chunk_size * P), kColumns);
  const float* cols = direct ? x + first * in_plane : col;
  if (!direct) im2col(s, x, first, n, col);
  if (O * K <= kSmallWeightGradient)
    small_weight_gradient(O, K, ld, g, cols, ld, dw);
  else
    gemm(false, true, O, K, ld, 1.0f, g, ld, cols, ld, 1.0f, dw, K);
  if (!dx) return;
  if (direct) {
    gemm(true, false, K, ld, O, 1.0f, w, K, g, ld, 0.0f, dx + first * in_plane, ld);
    return;
  }
  // The columns are no longer needed: reuse them for dL/dcol.
  gemm(true, false, K, ld, O, 1.0f, w, K, g, ld, 0.0f, col, ld);
  float* dxc = dx + first * in_plane;
  std::fill(dxc, dxc + n * in_plane, 0.0f);
  col2im_add(s, col, first, n, dx);
}

}  // namespace

// With one sample per chunk the GEMM's [O, P] output is the sample's own
// NCHW block, so the kernels use x, y, dy and dx in place and skip the
// transposes (and for pointwise convs, im2col too).
void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  if (dense_is_cheaper(s)) return dense_forward(s, x, w, bias, y);
  const Chunking c = chunking(s);
  for_each_chunk(s, c, [&](int64_t first, int64_t n) { forward_chunk(s, x, w, bias, y, first, n, c.size); });
}

void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx,
                     float* dw, float* dbias) {
  const int64_t O = s.out_channels, K = s.patch();
  if (dbias) bias_gradient(s, dy, dbias);
  if (dense_is_cheaper(s)) return dense_backward(s, x, w, dy, dx, dw);
  // dx as a convolution of dy (see input_gradient_as_convolution): the
  // chunks then only compute dw.
  const bool dx_by_convolution = dx && input_gradient_as_convolution(s);
  float* dx_by_columns = dx_by_convolution ? nullptr : dx;
  const Chunking c = chunking(s);
  if (!c.parallel) {
    for_each_chunk(s, c, [&](int64_t first, int64_t n) {
      backward_chunk(s, x, w, dy, dx_by_columns, dw, first, n, c.size);
    });
  } else {
    // The chunks are cut into a fixed number of runs of consecutive chunks.
    // Threads take whole runs as they come free; a run sums its chunks' dw
    // into its own buffer, and the buffers are added to dw in run order:
    // the same sums whichever thread ran which run.
    const int64_t runs = std::min<int64_t>(c.count, kRunsPerThread * compute_threads());
    float* partial = Scratch::floats(static_cast<size_t>(runs * O * K), kWeightGradient);
#pragma omp parallel num_threads(compute_threads())
    {
#pragma omp for schedule(dynamic, 1)
      for (int64_t r = 0; r < runs; ++r) {
        float* mine = partial + r * O * K;
        std::fill(mine, mine + O * K, 0.0f);
        for (int64_t k = c.count * r / runs; k < c.count * (r + 1) / runs; ++k) {
          const int64_t first = k * c.size;
          backward_chunk(s, x, w, dy, dx_by_columns, mine, first, std::min(c.size, s.batch - first), c.size);
        }
      }
      // The implicit barrier above: every partial is complete.
#pragma omp for schedule(static)
      for (int64_t j = 0; j < O * K; ++j)
        for (int64_t r = 0; r < runs; ++r) dw[j] += partial[r * O * K + j];
    }
  }
  if (dx_by_convolution) {
    float* wf = Scratch::floats(static_cast<size_t>(O * K), kFlippedWeights);
    flip_kernel(s, w, wf);
    conv2d_forward(transposed_shape(s), dy, wf, nullptr, dx);
  }
}

}  // namespace pd::cpu
