#include "core/cpu/conv_kernels.h"

#include <algorithm>
#include <cstring>

#include <omp.h>

#include "core/cpu/conv_dense_kernels.h"
#include "core/cpu/conv_direct_kernels.h"
#include "core/cpu/fast_math.h"
#include "core/cpu/gemm.h"
#include "core/cpu/parallel.h"
#include "core/cpu/row_dot_kernels.h"
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
bool pointwise(const ConvShape& s) { return s.kernel_h == 1 && s.stride == 1 && s.padding == 0; }

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
  return s.stride == 1 && s.padding <= s.kernel_h - 1 && !pointwise(s);
}

ConvShape transposed_shape(const ConvShape& s) {
  ConvShape t;
  t.batch = s.batch;
  t.in_channels = s.out_channels;
  t.in_h = s.out_h();
  t.in_w = s.out_w();
  t.out_channels = s.in_channels;
  t.kernel_h = t.kernel_w = s.kernel_h;
  t.stride = 1;
  t.padding = s.kernel_h - 1 - s.padding;
  return t;
}

// wf[c, o, a, b] = w[o, c, k-1-a, k-1-b]. In blocks of input channels, so
// that both the reads and the writes run along a few rows (a plain loop
// over c then o strides through all of w per element: a few ms for a
// 512x512 3x3 kernel, a fifth of its input gradient).
void flip_kernel(const ConvShape& s, const float* w, float* wf) {
  constexpr int64_t kBlock = 8;
  const int64_t O = s.out_channels, C = s.in_channels, kk = int64_t{s.kernel_h} * s.kernel_h;
  for (int64_t c0 = 0; c0 < C; c0 += kBlock)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t c = c0; c < std::min(C, c0 + kBlock); ++c) {
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
  const int64_t O = s.out_channels, P = s.out_h() * s.out_w(), N = s.batch;
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
  const int64_t O = s.out_channels, P = s.out_h() * s.out_w(), ld = n * P;
  parallel_ranges(O, n * O * P, [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t i = 0; i < n; ++i) copy_row(dy + ((first + i) * O + o) * P, P, dst + o * ld + i * P);
  });
}

}  // namespace

int64_t conv_chunk_samples(const ConvShape& s) {
  const int64_t P = std::max<int64_t>(s.out_h() * s.out_w(), 1);
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
  const int64_t mnk = s.out_channels * s.patch() * s.batch * s.out_h() * s.out_w();
  c.parallel = threads > 1 && !omp_in_parallel() && s.batch >= threads && mnk >= kParallelMinMnk;
  if (c.parallel) {
    // A multiple of the thread count, so that the threads get equal shares.
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

// One chunk of the forward pass, in the calling thread's scratch (sized for
// chunk_size samples, so that a short last chunk reuses the buffers).
void forward_chunk(const ConvShape& s, const float* x, const float* w, const float* bias, float* y, int64_t first,
                   int64_t n, int64_t chunk_size) {
  const int64_t O = s.out_channels, K = s.patch(), P = s.out_h() * s.out_w(), ld = n * P;
  const float* cols = x + first * s.in_channels * s.in_h * s.in_w;
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

// Weight gradients with at most this many entries (first layers: 1 or 3
// input channels) as dot products of rows (row_dot_kernels.h): OpenBLAS
// packs both operands to produce a few hundred outputs, which halved its
// speed on them.
constexpr int64_t kSmallWeightGradient = 2048;

// One chunk of the backward pass: dw += this chunk's weight gradient when
// dw is not null and, when dx is not null, dx's samples [first, first + n)
// by im2col's transpose.
void backward_chunk(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
                    int64_t first, int64_t n, int64_t chunk_size) {
  const int64_t O = s.out_channels, K = s.patch(), P = s.out_h() * s.out_w(), ld = n * P;
  const int64_t in_plane = s.in_channels * s.in_h * s.in_w;
  const float* g = dy + first * O * P;
  if (n > 1) {
    float* dyt = Scratch::floats(static_cast<size_t>(O * chunk_size * P), kOutput);
    gather_output_rows(s, dy, first, n, dyt);
    g = dyt;
  }
  const bool direct = n == 1 && pointwise(s);
  float* col = direct ? nullptr : Scratch::floats(static_cast<size_t>(K * chunk_size * P), kColumns);
  if (dw) {
    const float* cols = direct ? x + first * in_plane : col;
    if (!direct) im2col(s, x, first, n, col);
    if (O * K <= kSmallWeightGradient)
      accumulate_row_dots(O, K, ld, g, cols, ld, dw);
    else
      gemm(false, true, O, K, ld, 1.0f, g, ld, cols, ld, 1.0f, dw, K);
  }
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

// Which kernels a call may use: the direct ones where they are chosen, or
// im2col + sgemm only (the reference).
enum class Route { Best, Im2col };

void forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y, Route route) {
  if (conv_dense_is_cheaper(s)) return conv2d_dense_forward(s, x, w, bias, y);
  if (route == Route::Best && conv_direct_forward_chosen(s)) return conv2d_direct_forward(s, x, w, bias, y);
  const Chunking c = chunking(s);
  for_each_chunk(s, c, [&](int64_t first, int64_t n) { forward_chunk(s, x, w, bias, y, first, n, c.size); });
}

void input_gradient_by_convolution(const ConvShape& s, const float* w, const float* dy, float* dx, Route route) {
  float* wf = Scratch::floats(static_cast<size_t>(s.out_channels * s.patch()), kFlippedWeights);
  flip_kernel(s, w, wf);
  forward(transposed_shape(s), dy, wf, nullptr, dx, route);
}

void backward_input(const ConvShape& s, const float* w, const float* dy, float* dx, Route route) {
  if (conv_dense_is_cheaper(s)) return conv2d_dense_backward(s, nullptr, w, dy, dx, nullptr);
  if (input_gradient_as_convolution(s)) return input_gradient_by_convolution(s, w, dy, dx, route);
  const Chunking c = chunking(s);
  for_each_chunk(s, c, [&](int64_t first, int64_t n) {
    backward_chunk(s, nullptr, w, dy, dx, nullptr, first, n, c.size);
  });
}

void backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx, float* dw,
              float* dbias, Route route) {
  const int64_t O = s.out_channels, K = s.patch();
  if (dbias) bias_gradient(s, dy, dbias);
  if (conv_dense_is_cheaper(s)) return conv2d_dense_backward(s, x, w, dy, dx, dw);
  if (dw && route == Route::Best && conv_direct_params_chosen(s)) {
    conv2d_direct_backward_params(s, x, dy, dw);
    if (dx) backward_input(s, w, dy, dx, route);
    return;
  }
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
  if (dx_by_convolution) input_gradient_by_convolution(s, w, dy, dx, route);
}

}  // namespace

// With one sample per chunk the GEMM's [O, P] output is the sample's own
// NCHW block, so the kernels use x, y, dy and dx in place and skip the
// transposes (and for pointwise convs, im2col too).
void conv2d_forward(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  forward(s, x, w, bias, y, Route::Best);
}

void conv2d_backward(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx,
                     float* dw, float* dbias) {
  backward(s, x, w, dy, dx, dw, dbias, Route::Best);
}

void conv2d_backward_input(const ConvShape& s, const float* w, const float* dy, float* dx) {
  backward_input(s, w, dy, dx, Route::Best);
}

void conv2d_backward_params(const ConvShape& s, const float* x, const float* dy, float* dw, float* dbias) {
  backward(s, x, nullptr, dy, nullptr, dw, dbias, Route::Best);
}

void conv2d_forward_im2col(const ConvShape& s, const float* x, const float* w, const float* bias, float* y) {
  forward(s, x, w, bias, y, Route::Im2col);
}

void conv2d_backward_im2col(const ConvShape& s, const float* x, const float* w, const float* dy, float* dx,
                            float* dw, float* dbias) {
  backward(s, x, w, dy, dx, dw, dbias, Route::Im2col);
}

}  // namespace pd::cpu
