#include "core/cpu/row_dot_kernels.h"

#include <cstring>

#include "core/cpu/fast_math.h"

namespace pd::cpu {

namespace {

// Accumulators as named vectors, not an array (which GCC keeps on the stack).
template <int NO, int NR>
void row_dot_block(const float* g, const float* cols, int64_t ld, int64_t L, int64_t K, float* dw) {
  static_assert(NO >= 1 && NO <= 2 && NR >= 1 && NR <= 4);
  f32x8 c00 = splat8(0.0f), c01 = c00, c02 = c00, c03 = c00, c10 = c00, c11 = c00, c12 = c00, c13 = c00;
  const float* g1 = g + (NO > 1 ? ld : 0);
  int64_t j = 0;
  for (; j + 8 <= L; j += 8) {
    f32x8 a0, a1, b0, b1, b2, b3;
    std::memcpy(&a0, g + j, sizeof a0);
    std::memcpy(&b0, cols + j, sizeof b0);
    c00 += a0 * b0;
    if constexpr (NR > 1) {
      std::memcpy(&b1, cols + ld + j, sizeof b1);
      c01 += a0 * b1;
    }
    if constexpr (NR > 2) {
      std::memcpy(&b2, cols + 2 * ld + j, sizeof b2);
      c02 += a0 * b2;
    }
    if constexpr (NR > 3) {
      std::memcpy(&b3, cols + 3 * ld + j, sizeof b3);
      c03 += a0 * b3;
    }
    if constexpr (NO > 1) {
      std::memcpy(&a1, g1 + j, sizeof a1);
      c10 += a1 * b0;
      if constexpr (NR > 1) c11 += a1 * b1;
      if constexpr (NR > 2) c12 += a1 * b2;
      if constexpr (NR > 3) c13 += a1 * b3;
    }
  }
  const f32x8 acc[2][4] = {{c00, c01, c02, c03}, {c10, c11, c12, c13}};
  for (int i = 0; i < NO; ++i)
    for (int r = 0; r < NR; ++r) {
      float sum = 0;
      for (int l = 0; l < 8; ++l) sum += acc[i][r][l];
      for (int64_t t = j; t < L; ++t) sum += g[i * ld + t] * cols[r * ld + t];
      dw[i * K + r] += sum;
    }
}

template <int NO>
void row_dot_rows(const float* g, const float* cols, int64_t ld, int64_t L, int64_t K, float* dw) {
  int64_t r = 0;
  for (; r + 4 <= K; r += 4) row_dot_block<NO, 4>(g, cols + r * ld, ld, L, K, dw + r);
  switch (K - r) {
    case 3: return row_dot_block<NO, 3>(g, cols + r * ld, ld, L, K, dw + r);
    case 2: return row_dot_block<NO, 2>(g, cols + r * ld, ld, L, K, dw + r);
    case 1: return row_dot_block<NO, 1>(g, cols + r * ld, ld, L, K, dw + r);
    default: return;
  }
}

}  // namespace

void accumulate_row_dots(int64_t O, int64_t K, int64_t L, const float* g, const float* cols, int64_t ld,
                         float* dw) {
  int64_t o = 0;
  for (; o + 2 <= O; o += 2) row_dot_rows<2>(g + o * ld, cols, ld, L, K, dw + o * K);
  if (o < O) row_dot_rows<1>(g + o * ld, cols, ld, L, K, dw + o * K);
}

}  // namespace pd::cpu
