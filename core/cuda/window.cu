// Zero-padded copies for cuDNN convolutions with uneven pads, and pooling
// beyond cuDNN's (ceil mode, uneven pads): one thread per output element
// forward, one per input element backward, so nothing races and every sum
// has a fixed order.
#include <math_constants.h>

#include "core/cuda/launch.cuh"
#include "core/cuda/window_kernels.h"

namespace pd::cuda::kernels {

namespace {

__global__ void pad_kernel(int64_t n, int64_t H, int64_t W, int64_t top, int64_t left, int64_t HP, int64_t WP,
                           const float* x, float* y) {
  PD_GRID_STRIDE(i, n) {
    const int64_t c = i % WP, r = (i / WP) % HP, plane = i / (WP * HP);
    const int64_t h = r - top, w = c - left;
    y[i] = h >= 0 && h < H && w >= 0 && w < W ? x[(plane * H + h) * W + w] : 0.0f;
  }
}

__global__ void crop_kernel(int64_t n, int64_t H, int64_t W, int64_t top, int64_t left, int64_t HP, int64_t WP,
                            const float* y, float* x) {
  PD_GRID_STRIDE(i, n) {
    const int64_t w = i % W, h = (i / W) % H, plane = i / (W * H);
    x[i] = y[(plane * HP + h + top) * WP + w + left];
  }
}

// Input rows [h0, h1) and columns [w0, w1) of output (i, j) and its
// average's divisor, as cpu::pool2d_forward_general's window_of.
struct Window {
  int64_t h0, h1, w0, w1, divisor;
};
__device__ Window window_of(const PoolWindow& p, int64_t i, int64_t j) {
  int64_t h0 = i * p.stride_h - p.top, w0 = j * p.stride_w - p.left;
  int64_t h1 = min(h0 + p.kernel_h, p.H + p.bottom), w1 = min(w0 + p.kernel_w, p.W + p.right);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = max(h0, int64_t{0});
  w0 = max(w0, int64_t{0});
  h1 = min(h1, p.H);
  w1 = min(w1, p.W);
  const int64_t inside = (h1 - h0) * (w1 - w0);
  return {h0, h1, w0, w1, max(int64_t{1}, p.count_include_pad ? padded : inside)};
}

// Outputs [lo, hi] along one axis whose windows hold input cell `at`
// (empty when lo > hi): start = o * stride - before <= at < start + kernel.
__device__ void covering(int64_t at, int64_t kernel, int64_t stride, int64_t before, int64_t outputs, int64_t* lo,
                         int64_t* hi) {
  const int64_t first_end = at + before - kernel;  // windows starting at or before this miss `at`
  *lo = first_end < 0 ? 0 : first_end / stride + 1;
  *hi = min((at + before) / stride, outputs - 1);
}

__global__ void pool_max_fwd_kernel(PoolWindow p, const float* x, float* y, int32_t* argmax) {
  PD_GRID_STRIDE(o, p.planes * p.OH * p.OW) {
    const int64_t j = o % p.OW, i = (o / p.OW) % p.OH, plane = o / (p.OW * p.OH);
    const float* xp = x + plane * p.H * p.W;
    const Window w = window_of(p, i, j);
    float best = -CUDART_INF_F;
    int32_t at = -1;
    for (int64_t r = w.h0; r < w.h1; ++r)
      for (int64_t c = w.w0; c < w.w1; ++c)
        if (xp[r * p.W + c] > best || at < 0) {
          best = xp[r * p.W + c];
          at = static_cast<int32_t>(r * p.W + c);
        }
    if (y) y[o] = best;
    if (argmax) argmax[o] = at;
  }
}

__global__ void pool_avg_fwd_kernel(PoolWindow p, const float* x, float* y) {
  PD_GRID_STRIDE(o, p.planes * p.OH * p.OW) {
    const int64_t j = o % p.OW, i = (o / p.OW) % p.OH, plane = o / (p.OW * p.OH);
    const float* xp = x + plane * p.H * p.W;
    const Window w = window_of(p, i, j);
    float sum = 0.0f;
    for (int64_t r = w.h0; r < w.h1; ++r)
      for (int64_t c = w.w0; c < w.w1; ++c) sum = __fadd_rn(sum, xp[r * p.W + c]);
    y[o] = __fdiv_rn(sum, static_cast<float>(w.divisor));
  }
}

__global__ void pool_max_bwd_kernel(PoolWindow p, const int32_t* argmax, const float* dy, float* dx) {
  PD_GRID_STRIDE(e, p.planes * p.H * p.W) {
    const int64_t c = e % p.W, r = (e / p.W) % p.H, plane = e / (p.W * p.H);
    int64_t i0, i1, j0, j1;
    covering(r, p.kernel_h, p.stride_h, p.top, p.OH, &i0, &i1);
    covering(c, p.kernel_w, p.stride_w, p.left, p.OW, &j0, &j1);
    const int32_t self = static_cast<int32_t>(r * p.W + c);
    float sum = 0.0f;
    for (int64_t i = i0; i <= i1; ++i)
      for (int64_t j = j0; j <= j1; ++j) {
        const int64_t o = (plane * p.OH + i) * p.OW + j;
        if (argmax[o] == self) sum = __fadd_rn(sum, dy[o]);
      }
    dx[e] = sum;
  }
}

__global__ void pool_avg_bwd_kernel(PoolWindow p, const float* dy, float* dx) {
  PD_GRID_STRIDE(e, p.planes * p.H * p.W) {
    const int64_t c = e % p.W, r = (e / p.W) % p.H, plane = e / (p.W * p.H);
    int64_t i0, i1, j0, j1;
    covering(r, p.kernel_h, p.stride_h, p.top, p.OH, &i0, &i1);
    covering(c, p.kernel_w, p.stride_w, p.left, p.OW, &j0, &j1);
    float sum = 0.0f;
    for (int64_t i = i0; i <= i1; ++i)
      for (int64_t j = j0; j <= j1; ++j) {
        const int64_t o = (plane * p.OH + i) * p.OW + j;
        sum = __fadd_rn(sum, __fdiv_rn(dy[o], static_cast<float>(window_of(p, i, j).divisor)));
      }
    dx[e] = sum;
  }
}

}  // namespace

void pad_planes(int64_t planes, int64_t H, int64_t W, int64_t top, int64_t left, int64_t bottom, int64_t right,
                const float* x, float* y, cudaStream_t s) {
  const int64_t HP = H + top + bottom, WP = W + left + right, n = planes * HP * WP;
  pad_kernel<<<grid_for(n), kThreads, 0, s>>>(n, H, W, top, left, HP, WP, x, y);
  CUDA_CHECK_LAUNCH();
}

void crop_planes(int64_t planes, int64_t H, int64_t W, int64_t top, int64_t left, int64_t bottom, int64_t right,
                 const float* y, float* x, cudaStream_t s) {
  const int64_t HP = H + top + bottom, WP = W + left + right, n = planes * H * W;
  crop_kernel<<<grid_for(n), kThreads, 0, s>>>(n, H, W, top, left, HP, WP, y, x);
  CUDA_CHECK_LAUNCH();
}

void pool_max_forward(const PoolWindow& p, const float* x, float* y, int32_t* argmax, cudaStream_t s) {
  pool_max_fwd_kernel<<<grid_for(p.planes * p.OH * p.OW), kThreads, 0, s>>>(p, x, y, argmax);
  CUDA_CHECK_LAUNCH();
}

void pool_avg_forward(const PoolWindow& p, const float* x, float* y, cudaStream_t s) {
  pool_avg_fwd_kernel<<<grid_for(p.planes * p.OH * p.OW), kThreads, 0, s>>>(p, x, y);
  CUDA_CHECK_LAUNCH();
}

void pool_max_backward(const PoolWindow& p, const int32_t* argmax, const float* dy, float* dx, cudaStream_t s) {
  pool_max_bwd_kernel<<<grid_for(p.planes * p.H * p.W), kThreads, 0, s>>>(p, argmax, dy, dx);
  CUDA_CHECK_LAUNCH();
}

void pool_avg_backward(const PoolWindow& p, const float* dy, float* dx, cudaStream_t s) {
  pool_avg_bwd_kernel<<<grid_for(p.planes * p.H * p.W), kThreads, 0, s>>>(p, dy, dx);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels
