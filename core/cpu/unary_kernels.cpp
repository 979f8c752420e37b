#include "core/cpu/unary_kernels.h"

#include <algorithm>
#include <cmath>

namespace pd::cpu {

namespace {

// One loop per map (the switch hoisted out of it).
template <UnaryFn F>
inline float apply(float x, float p0, float p1) {
  if constexpr (F == UnaryFn::Erf) return std::erf(x);
  if constexpr (F == UnaryFn::Tanh) return std::tanh(x);
  if constexpr (F == UnaryFn::Sqrt) return std::sqrt(x);
  if constexpr (F == UnaryFn::Sigmoid) return 1.0f / (1.0f + std::exp(-x));
  if constexpr (F == UnaryFn::Neg) return -x;
  if constexpr (F == UnaryFn::Pow) return p0 == 2.0f ? x * x : std::pow(x, p0);
  if constexpr (F == UnaryFn::Clip) return std::min(std::max(x, p0), p1);
  if constexpr (F == UnaryFn::Sin) return std::sin(x);
  if constexpr (F == UnaryFn::Cos) return std::cos(x);
  if constexpr (F == UnaryFn::Exp) return std::exp(x);
  if constexpr (F == UnaryFn::Reciprocal) return 1.0f / x;
  if constexpr (F == UnaryFn::HardSigmoid) return std::min(1.0f, std::max(0.0f, p0 * x + p1));
  if constexpr (F == UnaryFn::HardSwish) return x * std::min(1.0f, std::max(0.0f, x / 6.0f + 0.5f));
  return x;
}

// d/dx given s: the output for unary_backward_reads_output maps, else the input.
template <UnaryFn F>
inline float derivative(float s, float p0, float p1) {
  if constexpr (F == UnaryFn::Erf) return 1.1283791670955126f * std::exp(-s * s);  // 2/sqrt(pi) e^{-x^2}
  if constexpr (F == UnaryFn::Tanh) return 1.0f - s * s;
  if constexpr (F == UnaryFn::Sqrt) return 0.5f / s;
  if constexpr (F == UnaryFn::Sigmoid) return s * (1.0f - s);
  if constexpr (F == UnaryFn::Neg) return -1.0f;
  if constexpr (F == UnaryFn::Pow) return p0 == 2.0f ? 2.0f * s : p0 * std::pow(s, p0 - 1.0f);
  if constexpr (F == UnaryFn::Clip) return s > p0 && s < p1 ? 1.0f : 0.0f;
  if constexpr (F == UnaryFn::Sin) return std::cos(s);
  if constexpr (F == UnaryFn::Cos) return -std::sin(s);
  if constexpr (F == UnaryFn::Exp) return s;
  if constexpr (F == UnaryFn::Reciprocal) return -s * s;
  // PyTorch's: the slope inside (-3, 3) only, for HardSwish 0 below -3, 1 above 3.
  if constexpr (F == UnaryFn::HardSigmoid) return p0 * s + p1 > 0.0f && p0 * s + p1 < 1.0f ? p0 : 0.0f;
  if constexpr (F == UnaryFn::HardSwish) return s < -3.0f ? 0.0f : s <= 3.0f ? s / 3.0f + 0.5f : 1.0f;
  return 1.0f;
}

template <UnaryFn F>
void forward_loop(UnaryParams f, int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = apply<F>(x[i], f.p0, f.p1);
}

template <UnaryFn F>
void backward_loop(UnaryParams f, int64_t n, const float* s, const float* dy, float* dx) {
  for (int64_t i = 0; i < n; ++i) dx[i] = dy[i] * derivative<F>(s[i], f.p0, f.p1);
}

// Calls body.template operator()<F>() for the runtime map f.
template <class Body>
void dispatch(UnaryFn f, Body&& body) {
  switch (f) {
    case UnaryFn::Erf: return body.template operator()<UnaryFn::Erf>();
    case UnaryFn::Tanh: return body.template operator()<UnaryFn::Tanh>();
    case UnaryFn::Sqrt: return body.template operator()<UnaryFn::Sqrt>();
    case UnaryFn::Sigmoid: return body.template operator()<UnaryFn::Sigmoid>();
    case UnaryFn::Neg: return body.template operator()<UnaryFn::Neg>();
    case UnaryFn::Pow: return body.template operator()<UnaryFn::Pow>();
    case UnaryFn::Clip: return body.template operator()<UnaryFn::Clip>();
    case UnaryFn::Sin: return body.template operator()<UnaryFn::Sin>();
    case UnaryFn::Cos: return body.template operator()<UnaryFn::Cos>();
    case UnaryFn::Exp: return body.template operator()<UnaryFn::Exp>();
    case UnaryFn::Reciprocal: return body.template operator()<UnaryFn::Reciprocal>();
    case UnaryFn::HardSigmoid: return body.template operator()<UnaryFn::HardSigmoid>();
    case UnaryFn::HardSwish: return body.template operator()<UnaryFn::HardSwish>();
  }
}

}  // namespace

void unary_forward(UnaryParams f, int64_t n, const float* x, float* y) {
  dispatch(f.fn, [&]<UnaryFn F>() { forward_loop<F>(f, n, x, y); });
}

void unary_backward(UnaryParams f, int64_t n, const float* saved, const float* dy, float* dx) {
  dispatch(f.fn, [&]<UnaryFn F>() { backward_loop<F>(f, n, saved, dy, dx); });
}

void softmax_axis_forward(int64_t outer, int64_t len, int64_t inner, const float* xp, float* yp) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const float* xr = xp + o * len * inner + i;
      float* yr = yp + o * len * inner + i;
      float m = -INFINITY;
      for (int64_t k = 0; k < len; ++k) m = std::max(m, xr[k * inner]);
      double sum = 0;
      for (int64_t k = 0; k < len; ++k) {
        yr[k * inner] = std::exp(xr[k * inner] - m);
        sum += yr[k * inner];
      }
      const float inv = static_cast<float>(1.0 / sum);
      for (int64_t k = 0; k < len; ++k) yr[k * inner] *= inv;
    }
}

void softmax_axis_backward(int64_t outer, int64_t len, int64_t inner, const float* yp, const float* gp, float* dp) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t base = o * len * inner + i;
      double dot = 0;
      for (int64_t k = 0; k < len; ++k) dot += double(yp[base + k * inner]) * gp[base + k * inner];
      for (int64_t k = 0; k < len; ++k)
        dp[base + k * inner] = yp[base + k * inner] * (gp[base + k * inner] - static_cast<float>(dot));
    }
}

}  // namespace pd::cpu
