#include "core/cpu/linear_kernels.h"

#include <algorithm>

#include "core/cpu/gemm.h"
#include "core/cpu/parallel_grain.h"

namespace pd::cpu {

void linear_forward(const float* x, const float* W, const float* b, float* y, int64_t rows,
                    int64_t in, int64_t out) {
  float beta = 0.0f;
  if (b) {
#pragma omp parallel for schedule(static) if(worth_parallel(rows * out))
    for (int64_t r = 0; r < rows; ++r) std::copy(b, b + out, y + r * out);
    beta = 1.0f;
  }
  gemm(false, true, rows, out, in, 1.0f, x, in, W, in, beta, y, out);
}

void linear_backward(const float* x, const float* W, const float* dy, float* dx, float* dW,
                     float* db, int64_t rows, int64_t in, int64_t out) {
  gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dW, in);
  if (db) add_column_sums(dy, rows, out, db);
  if (dx) gemm(false, false, rows, in, out, 1.0f, dy, out, W, in, 0.0f, dx, in);
}

void add_column_sums(const float* m, int64_t rows, int64_t cols, float* acc) {
  // Chunks of 64 columns keep each thread's accumulators in registers/L1.
  constexpr int64_t kChunk = 64;
  int64_t chunks = (cols + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if(worth_parallel(rows * cols))
  for (int64_t ch = 0; ch < chunks; ++ch) {
    int64_t c0 = ch * kChunk, c1 = std::min(cols, c0 + kChunk);
    float* a = acc + c0;
    for (int64_t r = 0; r < rows; ++r) {
      const float* row = m + r * cols;
      for (int64_t c = c0; c < c1; ++c) a[c - c0] += row[c];
    }
  }
}

}  // namespace pd::cpu
