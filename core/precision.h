#pragma once
// The arithmetic precision of a training run (--precision). FP32 is plain
// float everywhere. BF16 is mixed precision: master weights, gradient
// accumulation, optimizer state, normalisation statistics, softmax and the
// loss stay FP32; matrix-multiply and convolution operands, the
// activations a layer saves for its backward and the tensors sent between
// stages are rounded to bfloat16 (round to nearest even) at fixed points,
// the same on every backend, with FP32 arithmetic between those points.
#include <cstdint>
#include <cstring>

namespace pd {

enum class Precision : uint8_t { FP32, BF16 };

// Round to the nearest bfloat16, ties to even, kept in a float (NaN stays NaN).
inline float round_to_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return x;  // NaN: keep it quiet, unchanged
  u += 0x7fffu + ((u >> 16) & 1u);
  u &= 0xffff0000u;
  float r;
  std::memcpy(&r, &u, sizeof r);
  return r;
}

// The bfloat16 nearest to x (round_to_bf16) as its 16 bits: the upper half of the float's.
inline uint16_t bf16_bits(float x) {
  const float r = round_to_bf16(x);
  uint32_t u;
  std::memcpy(&u, &r, sizeof u);
  return static_cast<uint16_t>(u >> 16);
}

// The float a bfloat16's bits stand for (exact).
inline float bf16_value(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}

}  // namespace pd
