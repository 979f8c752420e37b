#pragma once
// Row-major GEMM on cuBLAS (column-major underneath), on the compute stream.
#include <cstdint>

namespace pd::cuda {

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc);
void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                          int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                          float* C, int64_t ldc, int64_t stride_c, int64_t batch);

}  // namespace pd::cuda
