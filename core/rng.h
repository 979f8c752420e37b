#pragma once
// Counter-based RNG (Philox-4x32-10). A stream is keyed by (seed, a, b) -
// e.g. (seed, layer index, minibatch id) for dropout, (seed, layer index, 0)
// for initialisation - so the numbers do not depend on which worker draws
// them or in what order. The same function runs on the GPU (host+device).
#include <cstdint>

#if defined(__CUDACC__)
#define PD_HD __host__ __device__
#else
#define PD_HD
#endif

namespace pd {

struct Philox4 {
  uint32_t v[4];
};

// Philox-4x32's multipliers and key increments (Salmon et al. 2011); vector
// versions of philox4x32 (core/cpu/dropout_kernels.cpp) use them too.
struct PhiloxConstants {
  static constexpr uint32_t M0 = 0xD2511F53u, M1 = 0xCD9E8D57u, W0 = 0x9E3779B9u, W1 = 0xBB67AE85u;
  static constexpr int kRounds = 10;
};

PD_HD inline Philox4 philox4x32(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                                uint32_t k1) {
  constexpr uint32_t M0 = PhiloxConstants::M0, M1 = PhiloxConstants::M1;
  constexpr uint32_t W0 = PhiloxConstants::W0, W1 = PhiloxConstants::W1;
  for (int r = 0; r < PhiloxConstants::kRounds; ++r) {
    uint64_t p0 = static_cast<uint64_t>(M0) * c0;
    uint64_t p1 = static_cast<uint64_t>(M1) * c2;
    uint32_t h0 = static_cast<uint32_t>(p0 >> 32), l0 = static_cast<uint32_t>(p0);
    uint32_t h1 = static_cast<uint32_t>(p1 >> 32), l1 = static_cast<uint32_t>(p1);
    uint32_t n0 = h1 ^ c1 ^ k0, n2 = h0 ^ c3 ^ k1;
    c0 = n0; c1 = l1; c2 = n2; c3 = l0;
    k0 += W0; k1 += W1;
  }
  return {{c0, c1, c2, c3}};
}

// Uniform in [0, 1) from 24 random bits: exact in float on every device.
PD_HD inline float uniform01(uint32_t bits) { return static_cast<float>(bits >> 8) * (1.0f / 16777216.0f); }

// A stream of numbers: element i of stream (seed, a, b) is a pure function.
struct CounterRng {
  uint64_t seed = 0;
  uint32_t a = 0, b = 0;
  PD_HD CounterRng(uint64_t s, uint32_t a_, uint32_t b_) : seed(s), a(a_), b(b_) {}
  // 4 independent 32-bit words for block i.
  PD_HD Philox4 block(uint64_t i) const {
    return philox4x32(static_cast<uint32_t>(i), static_cast<uint32_t>(i >> 32), a, b,
                      static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  }
  PD_HD uint32_t bits(uint64_t i) const { return block(i / 4).v[i % 4]; }
  PD_HD float uniform(uint64_t i) const { return uniform01(bits(i)); }
  // Standard normal via Box-Muller on elements 2i and 2i+1.
  float normal(uint64_t i) const;
};

}  // namespace pd
