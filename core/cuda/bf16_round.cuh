#pragma once
// The device side of pd::round_to_bf16 (core/precision.h), bit for bit:
// nearest, ties to even, NaN unchanged. Shared by the rounding kernels and
// the fused kernels that round their outputs themselves.
#include <cstdint>

namespace pd::cuda::kernels {

__device__ inline float round_bf16_rne(float x) {
  uint32_t u = __float_as_uint(x);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return x;
  u += 0x7fffu + ((u >> 16) & 1u);
  return __uint_as_float(u & 0xffff0000u);
}

// x rounded when round is set, else x.
__device__ inline float round_bf16_if(bool round, float x) { return round ? round_bf16_rne(x) : x; }

// Element i of FP32 or bf16 storage (uint16_t: the float's upper half) as a
// float, and stored back: a bf16 store rounds (exact for bf16 values).
__device__ inline float load_value(const float* p, int64_t i) { return p[i]; }
__device__ inline float load_value(const uint16_t* p, int64_t i) {
  return __uint_as_float(static_cast<uint32_t>(p[i]) << 16);
}
__device__ inline void store_value(float* p, int64_t i, float v) { p[i] = v; }
__device__ inline void store_value(uint16_t* p, int64_t i, float v) {
  p[i] = static_cast<uint16_t>(__float_as_uint(round_bf16_rne(v)) >> 16);
}

}  // namespace pd::cuda::kernels
