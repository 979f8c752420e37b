#pragma once
// Launch geometry shared by the elementwise kernels: grid-stride loops over
// int64 indices, at most 4096 blocks of 256 threads.
#include <cstdint>

#include "core/cuda/check.h"

namespace pd::cuda::kernels {

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n) {
  int64_t b = (n + kThreads - 1) / kThreads;
  if (b < 1) b = 1;
  if (b > 4096) b = 4096;
  return static_cast<unsigned>(b);
}

#define PD_GRID_STRIDE(i, n) \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

}  // namespace pd::cuda::kernels
