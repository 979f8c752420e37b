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

}  // namespace pd::cuda::kernels
