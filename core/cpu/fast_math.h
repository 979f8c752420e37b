#pragma once
// exp and tanh on 8 floats at a time, written with GCC/Clang vector
// extensions: the scalar std::exp does not vectorise without -ffast-math,
// and a branch-free scalar version does not either (with trapping math GCC
// keeps the clamps as branches). Plain IEEE operations only, and every
// element goes through the same 8-wide code (tails are padded), so a result
// depends on its input alone: the same on every thread, run and split.
#include <cstdint>
#include <cstring>

namespace pd::cpu {

typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));

inline f32x8 splat8(float v) { return f32x8{v, v, v, v, v, v, v, v}; }

// exp(x) with ~2 ulp error (Cephes expf polynomial). Inputs are clamped to
// [-87, 88], so it saturates instead of overflowing to inf.
inline f32x8 exp8(f32x8 x) {
  const f32x8 lo = splat8(-87.0f), hi = splat8(88.0f);
  x = x < lo ? lo : x;
  x = x > hi ? hi : x;
  // Round to nearest by adding 1.5 * 2^23: n's integer lands in the low
  // mantissa bits of t, which gives 2^n without a float->int conversion.
  const f32x8 round = splat8(12582912.0f);
  f32x8 t = x * 1.44269504088896341f + round;
  f32x8 n = t - round;
  f32x8 r = x - n * 0.693359375f;
  r = r - n * -2.12194440e-4f;
  f32x8 p = splat8(1.9875691500e-4f);
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  f32x8 y = p * r * r + r + 1.0f;
  i32x8 bits = ((i32x8)t - 0x4B400000 + 127) << 23;
  return y * (f32x8)bits;
}

// tanh(u) = 1 - 2 / (exp(2u) + 1): exact limits +-1 through saturation.
inline f32x8 tanh8(f32x8 u) { return 1.0f - 2.0f / (exp8(2.0f * u) + 1.0f); }

// Applies f8 to n floats: full groups of 8 in place, the tail padded.
template <class F8>
inline void map8(const float* in, float* out, int64_t n, F8 f8) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f32x8 v;
    std::memcpy(&v, in + i, sizeof v);
    v = f8(v);
    std::memcpy(out + i, &v, sizeof v);
  }
  if (i < n) {
    f32x8 v = splat8(0.0f);
    std::memcpy(&v, in + i, sizeof(float) * static_cast<size_t>(n - i));
    v = f8(v);
    std::memcpy(out + i, &v, sizeof(float) * static_cast<size_t>(n - i));
  }
}

// Reductions in a fixed order (8 lane-wise partial sums, then lanes 0..7),
// which the compiler may not vectorise itself without -ffast-math.
inline float hsum8(f32x8 v) {
  float s = 0.0f;
  for (int l = 0; l < 8; ++l) s += v[l];
  return s;
}

inline f32x8 load8_padded(const float* p, int64_t n, float pad) {
  f32x8 v = splat8(pad);
  std::memcpy(&v, p, sizeof(float) * static_cast<size_t>(n));
  return v;
}

inline float sum8(const float* a, int64_t n) {
  f32x8 acc = splat8(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f32x8 v;
    std::memcpy(&v, a + i, sizeof v);
    acc += v;
  }
  if (i < n) acc += load8_padded(a + i, n - i, 0.0f);
  return hsum8(acc);
}

inline float dot8(const float* a, const float* b, int64_t n) {
  f32x8 acc = splat8(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f32x8 u, v;
    std::memcpy(&u, a + i, sizeof u);
    std::memcpy(&v, b + i, sizeof v);
    acc += u * v;
  }
  if (i < n) acc += load8_padded(a + i, n - i, 0.0f) * load8_padded(b + i, n - i, 0.0f);
  return hsum8(acc);
}

// sum of g[i] * (a[i] - c).
inline float dot_dev8(const float* g, const float* a, float c, int64_t n) {
  f32x8 acc = splat8(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f32x8 u, v;
    std::memcpy(&u, g + i, sizeof u);
    std::memcpy(&v, a + i, sizeof v);
    acc += u * (v - c);
  }
  if (i < n) acc += load8_padded(g + i, n - i, 0.0f) * (load8_padded(a + i, n - i, c) - c);
  return hsum8(acc);
}

// sum of (a[i] - c)^2.
inline float sum_sq_dev8(const float* a, float c, int64_t n) {
  f32x8 acc = splat8(0.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f32x8 v;
    std::memcpy(&v, a + i, sizeof v);
    v -= c;
    acc += v * v;
  }
  if (i < n) {
    f32x8 v = load8_padded(a + i, n - i, c) - c;
    acc += v * v;
  }
  return hsum8(acc);
}

inline float max8(const float* a, int64_t n) {
  f32x8 acc = splat8(a[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    f32x8 v;
    std::memcpy(&v, a + i, sizeof v);
    acc = v > acc ? v : acc;
  }
  if (i < n) {
    f32x8 v = load8_padded(a + i, n - i, a[0]);
    acc = v > acc ? v : acc;
  }
  float m = acc[0];
  for (int l = 1; l < 8; ++l) m = acc[l] > m ? acc[l] : m;
  return m;
}

inline float exp_approx(float x) { return exp8(splat8(x))[0]; }
inline float tanh_approx(float u) { return tanh8(splat8(u))[0]; }

}  // namespace pd::cpu
