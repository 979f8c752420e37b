#include "core/cpu/dropout_kernels.h"

#include <algorithm>

#include "core/cpu/parallel_grain.h"
#include "core/error.h"

namespace pd::cpu {

void dropout_apply(const DropoutKey& key, float p, const float* x, float* y, int64_t n) {
  PD_CHECK(n / 4 < (int64_t{1} << 32), "dropout over ", n, " elements exceeds the mask counter");
  const float scale = 1.0f / (1.0f - p);
  const CounterRng rng(key.seed, key.layer_index, key.minibatch_id);
  const uint64_t high = static_cast<uint64_t>(key.substream) << 32;
  const int64_t blocks = (n + 3) / 4;
  // One Philox call yields the mask of four consecutive elements.
#pragma omp parallel for schedule(static) if(worth_parallel(n))
  for (int64_t blk = 0; blk < blocks; ++blk) {
    Philox4 r = rng.block(static_cast<uint64_t>(blk) | high);
    int64_t i0 = blk * 4, i1 = std::min<int64_t>(n, i0 + 4);
    for (int64_t i = i0; i < i1; ++i) y[i] = uniform01(r.v[i - i0]) >= p ? x[i] * scale : 0.0f;
  }
}

}  // namespace pd::cpu
