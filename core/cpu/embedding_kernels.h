#pragma once
// Token + learned position embedding: y[b, t] = tok[ids[b, t]] + pos[t].
#include <cstdint>

namespace pd::cpu {

// ids: [batch, T] validated by the caller (0 <= id < vocab).
void embedding_forward(const int32_t* ids, const float* tok, const float* pos, float* y,
                       int64_t batch, int64_t T, int64_t D);

// Accumulates dtok[ids[b,t]] += dy[b,t] and dpos[t] += sum_b dy[b,t].
// Threads split the embedding columns, so repeated tokens are summed in
// (b, t) order whatever the thread count.
void embedding_backward(const int32_t* ids, const float* dy, float* dtok, float* dpos,
                        int64_t batch, int64_t T, int64_t D);

}  // namespace pd::cpu
