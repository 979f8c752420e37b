#pragma once
// Inverted dropout with a mask that is a pure function of its key: element
// i is kept iff uniform(bits_i) >= p, where bits_i is word i%4 of the
// Philox block (i/4 | substream << 32) of CounterRng(seed, layer, minibatch).
// Any worker, and a GPU kernel using the same formula, draws the same mask
// without storing it; backward regenerates it.
#include <cstdint>

#include "core/rng.h"

namespace pd::cpu {

struct DropoutKey {
  uint64_t seed = 0;
  uint32_t layer_index = 0;
  uint32_t minibatch_id = 0;
  uint32_t substream = 0;  // distinguishes several dropouts inside one top-level layer
};

// True when element i is kept.
PD_HD inline bool dropout_keep(const DropoutKey& k, float p, uint64_t i) {
  CounterRng rng(k.seed, k.layer_index, k.minibatch_id);
  Philox4 b = rng.block((i / 4) | (static_cast<uint64_t>(k.substream) << 32));
  return uniform01(b.v[i % 4]) >= p;
}

// y = x * mask / (1 - p). Also used for backward (dx = dy * mask / (1 - p)).
void dropout_apply(const DropoutKey& key, float p, const float* x, float* y, int64_t n);

}  // namespace pd::cpu
