#include "core/cuda/blas.h"

#include <limits>

#include "core/cuda/check.h"
#include "core/cuda/context.h"

namespace pd::cuda {

namespace {

int to_int(int64_t v, const char* what) {
  PD_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "cuBLAS ", what, " = ", v, " exceeds int range");
  return static_cast<int>(v);
}

}  // namespace

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
// operands and M/N, keep the transposition flags.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  Context& c = context();
  CUBLAS_CHECK(cublasSgemm(c.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                           to_int(N, "N"), to_int(M, "M"), to_int(K, "K"), &alpha, B, to_int(ldb, "ldb"), A,
                           to_int(lda, "lda"), &beta, C, to_int(ldc, "ldc")));
}

void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                          int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                          float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  Context& c = context();
  CUBLAS_CHECK(cublasSgemmStridedBatched(c.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(N, "N"), to_int(M, "M"),
                                         to_int(K, "K"), &alpha, B, to_int(ldb, "ldb"), stride_b, A,
                                         to_int(lda, "lda"), stride_a, &beta, C, to_int(ldc, "ldc"), stride_c,
                                         to_int(batch, "batch")));
}

}  // namespace pd::cuda
