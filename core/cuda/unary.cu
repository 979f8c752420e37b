// The ONNX ops' unary maps (one switch per element on a launch-wide
// constant) and softmax over the middle axis of [outer, len, inner], one
// thread per (outer, inner) row running the CPU's loops: max, exponentials
// summed in double in k order, one float scale.
#include <cmath>

#include "core/cuda/launch.cuh"
#include "core/cuda/strided_kernels.h"

namespace pd::cuda::kernels {

namespace {

// std::min / std::max as the CPU kernels use them (NaN in the first operand propagates).
__device__ float std_max(float a, float b) { return a < b ? b : a; }
__device__ float std_min(float a, float b) { return b < a ? b : a; }

__device__ float apply(const UnaryParams& f, float x) {
  switch (f.fn) {
    case UnaryFn::Erf: return erff(x);
    case UnaryFn::Tanh: return tanhf(x);
    case UnaryFn::Sqrt: return __fsqrt_rn(x);
    case UnaryFn::Sigmoid: return __fdiv_rn(1.0f, 1.0f + expf(-x));
    case UnaryFn::Neg: return -x;
    case UnaryFn::Pow: return f.p0 == 2.0f ? x * x : powf(x, f.p0);
    case UnaryFn::Clip: return std_min(std_max(x, f.p0), f.p1);
    case UnaryFn::Sin: return sinf(x);
    case UnaryFn::Cos: return cosf(x);
    case UnaryFn::Exp: return expf(x);
    case UnaryFn::Reciprocal: return __fdiv_rn(1.0f, x);
    case UnaryFn::HardSigmoid: return std_min(1.0f, std_max(0.0f, f.p0 * x + f.p1));
    case UnaryFn::HardSwish: return x * std_min(1.0f, std_max(0.0f, __fdiv_rn(x, 6.0f) + 0.5f));
  }
  return x;
}

// d/dx given s: f's output for unary_backward_reads_output maps, else its input.
__device__ float derivative(const UnaryParams& f, float s) {
  switch (f.fn) {
    case UnaryFn::Erf: return 1.1283791670955126f * expf(-s * s);
    case UnaryFn::Tanh: return 1.0f - s * s;
    case UnaryFn::Sqrt: return __fdiv_rn(0.5f, s);
    case UnaryFn::Sigmoid: return s * (1.0f - s);
    case UnaryFn::Neg: return -1.0f;
    case UnaryFn::Pow: return f.p0 == 2.0f ? 2.0f * s : f.p0 * powf(s, f.p0 - 1.0f);
    case UnaryFn::Clip: return s > f.p0 && s < f.p1 ? 1.0f : 0.0f;
    case UnaryFn::Sin: return cosf(s);
    case UnaryFn::Cos: return -sinf(s);
    case UnaryFn::Exp: return s;
    case UnaryFn::Reciprocal: return -s * s;
    case UnaryFn::HardSigmoid: {
      const float v = f.p0 * s + f.p1;
      return v > 0.0f && v < 1.0f ? f.p0 : 0.0f;
    }
    case UnaryFn::HardSwish: return s < -3.0f ? 0.0f : s <= 3.0f ? __fdiv_rn(s, 3.0f) + 0.5f : 1.0f;
  }
  return 1.0f;
}

__global__ void unary_fwd_kernel(UnaryParams f, int64_t n, const float* x, float* y) {
  PD_GRID_STRIDE(i, n) y[i] = apply(f, x[i]);
}

__global__ void unary_bwd_kernel(UnaryParams f, int64_t n, const float* s, const float* dy, float* dx) {
  PD_GRID_STRIDE(i, n) dx[i] = dy[i] * derivative(f, s[i]);
}

__global__ void softmax_axis_fwd_kernel(int64_t outer, int64_t len, int64_t inner, const float* x, float* y) {
  PD_GRID_STRIDE(r, outer * inner) {
    const int64_t o = r / inner, i = r - o * inner;
    const float* xr = x + o * len * inner + i;
    float* yr = y + o * len * inner + i;
    float m = -INFINITY;
    for (int64_t k = 0; k < len; ++k) m = fmaxf(m, xr[k * inner]);
    double sum = 0;
    for (int64_t k = 0; k < len; ++k) {
      const float e = expf(xr[k * inner] - m);
      yr[k * inner] = e;
      sum += e;
    }
    const float inv = static_cast<float>(1.0 / sum);
    for (int64_t k = 0; k < len; ++k) yr[k * inner] *= inv;
  }
}

__global__ void softmax_axis_bwd_kernel(int64_t outer, int64_t len, int64_t inner, const float* y, const float* dy,
                                        float* dx) {
  PD_GRID_STRIDE(r, outer * inner) {
    const int64_t o = r / inner, i = r - o * inner;
    const int64_t base = o * len * inner + i;
    double dot = 0;
    for (int64_t k = 0; k < len; ++k) dot += static_cast<double>(y[base + k * inner]) * dy[base + k * inner];
    const float d = static_cast<float>(dot);
    for (int64_t k = 0; k < len; ++k) dx[base + k * inner] = y[base + k * inner] * (dy[base + k * inner] - d);
  }
}

}  // namespace

void unary_forward(UnaryParams f, int64_t n, const float* x, float* y, cudaStream_t s) {
  if (n == 0) return;
  unary_fwd_kernel<<<grid_for(n), kThreads, 0, s>>>(f, n, x, y);
  CUDA_CHECK_LAUNCH();
}

void unary_backward(UnaryParams f, int64_t n, const float* saved, const float* dy, float* dx, cudaStream_t s) {
  if (n == 0) return;
  unary_bwd_kernel<<<grid_for(n), kThreads, 0, s>>>(f, n, saved, dy, dx);
  CUDA_CHECK_LAUNCH();
}

void softmax_axis_forward(int64_t outer, int64_t len, int64_t inner, const float* x, float* y, cudaStream_t s) {
  const int64_t rows = outer * inner;
  if (rows == 0 || len == 0) return;
  softmax_axis_fwd_kernel<<<grid_for(rows), kThreads, 0, s>>>(outer, len, inner, x, y);
  CUDA_CHECK_LAUNCH();
}

void softmax_axis_backward(int64_t outer, int64_t len, int64_t inner, const float* y, const float* dy, float* dx,
                           cudaStream_t s) {
  const int64_t rows = outer * inner;
  if (rows == 0 || len == 0) return;
  softmax_axis_bwd_kernel<<<grid_for(rows), kThreads, 0, s>>>(outer, len, inner, y, dy, dx);
  CUDA_CHECK_LAUNCH();
}

}  // namespace pd::cuda::kernels
