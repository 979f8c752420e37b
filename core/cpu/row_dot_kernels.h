#pragma once
// c [M, N] += a [M, L] * b [N, L]^T, rows of a and b with stride ld, for
// small M*N and long L (a convolution's weight gradient when it has few
// entries): register blocks of 2x4 dot products, 8 lanes each, read
// straight from the rows. A GEMM would pack both operands first, which
// costs as much as the arithmetic at these sizes. Each output's lanes and
// tail are summed in a fixed order: the same bits on any thread.
#include <cstdint>

namespace pd::cpu {

void accumulate_row_dots(int64_t M, int64_t N, int64_t L, const float* a, const float* b, int64_t ld, float* c);

}  // namespace pd::cpu
