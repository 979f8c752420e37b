#include "core/cpu/embedding_kernels.h"

#include <algorithm>

#include "core/cpu/parallel_grain.h"

namespace pd::cpu {

void embedding_forward(const int32_t* ids, const float* tok, const float* pos, float* y,
                       int64_t batch, int64_t T, int64_t D) {
#pragma omp parallel for schedule(static) if(worth_parallel(batch * T * D))
  for (int64_t r = 0; r < batch * T; ++r) {
    const float* e = tok + static_cast<int64_t>(ids[r]) * D;
    const float* p = pos + (r % T) * D;
    float* yr = y + r * D;
    for (int64_t c = 0; c < D; ++c) yr[c] = e[c] + p[c];
  }
}

void embedding_backward(const int32_t* ids, const float* dy, float* dtok, float* dpos,
                        int64_t batch, int64_t T, int64_t D) {
  constexpr int64_t kChunk = 32;
  int64_t chunks = (D + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if(worth_parallel(batch * T * D))
  for (int64_t ch = 0; ch < chunks; ++ch) {
    int64_t c0 = ch * kChunk, c1 = std::min(D, c0 + kChunk);
    for (int64_t r = 0; r < batch * T; ++r) {
      const float* g = dy + r * D;
      float* e = dtok + static_cast<int64_t>(ids[r]) * D;
      float* p = dpos + (r % T) * D;
      for (int64_t c = c0; c < c1; ++c) {
        e[c] += g[c];
        p[c] += g[c];
      }
    }
  }
}

}  // namespace pd::cpu
