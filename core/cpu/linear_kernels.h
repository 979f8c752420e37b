#pragma once
// Linear layer kernels on raw row-major host pointers: y = x W^T + b over
// rows of x. A CUDA backend mirrors these signatures.
#include <cstdint>

namespace pd::cpu {

// y[rows, out] = x[rows, in] W[out, in]^T (+ b[out] when b is non-null).
void linear_forward(const float* x, const float* W, const float* b, float* y, int64_t rows,
                    int64_t in, int64_t out);

// Accumulates dW += dy^T x and (when db is non-null) db += column sums of
// dy; writes dx = dy W when dx is non-null.
void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW,
                     float* db, int64_t rows, int64_t in, int64_t out);

// acc[c] += sum over r of m[r, c]. Threads split the columns, so every
// sum runs over the rows in the same order whatever the thread count.
void add_column_sums(const float* m, int64_t rows, int64_t cols, float* acc);

}  // namespace pd::cpu
