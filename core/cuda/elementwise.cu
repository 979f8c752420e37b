// Elementwise kernels: fill, relu, add, scale, axpy, GELU (tanh form),
// dropout (Philox keyed like the CPU), bias rows, column sums, permute.
#include <cmath>

#include "core/cuda/bf16_round.cuh"
#include "core/cuda/kernels.h"
#include "core/cuda/launch.cuh"
#include "core/rng.h"

namespace pd::cuda::kernels {

namespace {

template <class T>
__global__ void fill_kernel(T* p, int64_t n, T v) {
  PD_GRID_STRIDE(i, n) p[i] = v;
}

__global__ void relu_fwd_kernel(int64_t n, const float* x, float* y, bool round) {
  PD_GRID_STRIDE(i, n) y[i] = round_bf16_if(round, x[i] <= 0.0f ? 0.0f : x[i]);  // as the CPU: NaN passes, -0 -> +0
}

__global__ void relu_bwd_kernel(int64_t n, const float* y, const float* dy, float* dx) {
  PD_GRID_STRIDE(i, n) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

// As the CPU's add_relu_forward: a NaN sum gives 0.
__global__ void add_relu_kernel(int64_t n, const float* a, const float* b, float* y, bool round) {
  PD_GRID_STRIDE(i, n) {
    const float s = a[i] + b[i];
    y[i] = round_bf16_if(round, s > 0.0f ? s : 0.0f);
  }
}

__global__ void add_kernel(int64_t n, const float* a, const float* b, float* y) {
  PD_GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

__global__ void scale_kernel(int64_t n, float alpha, const float* x, float* y) {
  PD_GRID_STRIDE(i, n) y[i] = alpha * x[i];
}

__global__ void axpy_kernel(int64_t n, float alpha, const float* x, float* y) {
  // fmaf would round differently from the CPU's a*x+y; keep two roundings.
  PD_GRID_STRIDE(i, n) y[i] = __fadd_rn(y[i], __fmul_rn(alpha, x[i]));
}

// IEEE division (__fdiv_rn, not a reciprocal multiply): the CPU's x / d.
__global__ void divide_kernel(int64_t n, float d, const float* x, float* y) {
  PD_GRID_STRIDE(i, n) y[i] = __fdiv_rn(x[i], d);
}

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluC = 0.044715f;

__global__ void gelu_fwd_kernel(int64_t n, const float* x, float* y) {
  PD_GRID_STRIDE(i, n) {
    float v = x[i];
    float t = tanhf(kSqrt2OverPi * (v + kGeluC * v * v * v));
    y[i] = 0.5f * v * (1.0f + t);
  }
}

__global__ void gelu_bwd_kernel(int64_t n, const float* x, const float* dy, float* dx) {
  PD_GRID_STRIDE(i, n) {
    float v = x[i];
    float t = tanhf(kSqrt2OverPi * (v + kGeluC * v * v * v));
    float d = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * kSqrt2OverPi * (1.0f + 3.0f * kGeluC * v * v);
    dx[i] = dy[i] * d;
  }
}

// One Philox block gives the uniforms of elements 4j .. 4j+3, exactly as
// cpu::dropout_apply: block (j | substream << 32) of CounterRng(seed, a, b).
__global__ void dropout_kernel(int64_t n, float p, float keep_scale, uint64_t seed, uint32_t a, uint32_t b,
                               uint32_t substream, const float* x, float* y) {
  int64_t blocks = (n + 3) / 4;
  CounterRng rng(seed, a, b);
  const uint64_t high = static_cast<uint64_t>(substream) << 32;
  PD_GRID_STRIDE(j, blocks) {
    Philox4 r = rng.block(static_cast<uint64_t>(j) | high);
    for (int k = 0; k < 4; ++k) {
      int64_t i = 4 * j + k;
      if (i >= n) break;
      bool keep = uniform01(r.v[k]) >= p;
      y[i] = keep ? x[i] * keep_scale : 0.0f;
    }
  }
}

__global__ void add_bias_rows_kernel(int64_t rows, int64_t cols, const float* bias, float* y) {
  PD_GRID_STRIDE(i, rows * cols) y[i] += bias[i % cols];
}

// One thread per column sums the rows in order: deterministic and coalesced.
struct PermuteArgs {
  int rank;
  int64_t y_shape[6];
  int64_t x_stride_for_y_dim[6];
};

__global__ void permute_kernel(PermuteArgs a, int64_t n, const float* x, float* y) {
  PD_GRID_STRIDE(i, n) {
    int64_t rest = i, off = 0;
    for (int d = a.rank - 1; d >= 0; --d) {
      int64_t c = rest % a.y_shape[d];
      rest /= a.y_shape[d];
      off += c * a.x_stride_for_y_dim[d];
    }
    y[i] = x[off];
  }
}

}  // namespace

void fill_f32(float* p, int64_t n, float v, cudaStream_t s) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, v);
  CUDA_CHECK_LAUNCH();
}
void fill_i32(int32_t* p, int64_t n, int32_t v, cudaStream_t s) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, v);
  CUDA_CHECK_LAUNCH();
}
void fill_i64(int64_t* p, int64_t n, int64_t v, cudaStream_t s) {
  if (n == 0) return;
  fill_kernel<<<grid_for(n), kThreads, 0, s>>>(p, n, v);
  CUDA_CHECK_LAUNCH();
}

void relu_forward(int64_t n, const float* x, float* y, bool round, cudaStream_t s) {
  if (n == 0) return;
  relu_fwd_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x, y, round);
  CUDA_CHECK_LAUNCH();
}
void add_relu_forward(int64_t n, const float* a, const float* b, float* y, bool round, cudaStream_t s) {
  if (n == 0) return;
  add_relu_kernel<<<grid_for(n), kThreads, 0, s>>>(n, a, b, y, round);
  CUDA_CHECK_LAUNCH();
}
void relu_backward(int64_t n, const float* y, const float* dy, float* dx, cudaStream_t s) {
  if (n == 0) return;
  relu_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(n, y, dy, dx);
  CUDA_CHECK_LAUNCH();
}
void add(int64_t n, const float* a, const float* b, float* y, cudaStream_t s) {
  if (n == 0) return;
  add_kernel<<<grid_for(n), kThreads, 0, s>>>(n, a, b, y);
  CUDA_CHECK_LAUNCH();
}
void scale(int64_t n, float alpha, const float* x, float* y, cudaStream_t s) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, s>>>(n, alpha, x, y);
  CUDA_CHECK_LAUNCH();
}
void axpy(int64_t n, float alpha, const float* x, float* y, cudaStream_t s) {
  if (n == 0) return;
  axpy_kernel<<<grid_for(n), kThreads, 0, s>>>(n, alpha, x, y);
  CUDA_CHECK_LAUNCH();
}
void divide(int64_t n, float d, const float* x, float* y, cudaStream_t s) {
  if (n == 0) return;
  divide_kernel<<<grid_for(n), kThreads, 0, s>>>(n, d, x, y);
  CUDA_CHECK_LAUNCH();
}
void gelu_forward(int64_t n, const float* x, float* y, cudaStream_t s) {
  if (n == 0) return;
  gelu_fwd_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x, y);
  CUDA_CHECK_LAUNCH();
}
void gelu_backward(int64_t n, const float* x, const float* dy, float* dx, cudaStream_t s) {
  if (n == 0) return;
  gelu_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(n, x, dy, dx);
  CUDA_CHECK_LAUNCH();
}
void dropout(int64_t n, float p, uint64_t seed, uint32_t a, uint32_t b, uint32_t substream, const float* x,
             float* y, cudaStream_t s) {
  if (n == 0) return;
  float keep_scale = p < 1.0f ? 1.0f / (1.0f - p) : 0.0f;
  dropout_kernel<<<grid_for((n + 3) / 4), kThreads, 0, s>>>(n, p, keep_scale, seed, a, b, substream, x, y);
  CUDA_CHECK_LAUNCH();
}
void add_bias_rows(int64_t rows, int64_t cols, const float* bias, float* y, cudaStream_t s) {
  if (rows * cols == 0) return;
  add_bias_rows_kernel<<<grid_for(rows * cols), kThreads, 0, s>>>(rows, cols, bias, y);
  CUDA_CHECK_LAUNCH();
}
void permute(int rank, const int64_t* x_shape, const int* perm, const float* x, float* y,
             cudaStream_t s) {
  PermuteArgs a{};
  a.rank = rank;
  int64_t x_stride[6];
  int64_t stride = 1, n = 1;
  for (int d = rank - 1; d >= 0; --d) {
    x_stride[d] = stride;
    stride *= x_shape[d];
  }
  for (int d = 0; d < rank; ++d) {
    a.y_shape[d] = x_shape[perm[d]];
    a.x_stride_for_y_dim[d] = x_stride[perm[d]];
    n *= x_shape[d];
  }
  if (n == 0) return;
  permute_kernel<<<grid_for(n), kThreads, 0, s>>>(a, n, x, y);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels
