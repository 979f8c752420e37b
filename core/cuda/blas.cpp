#include "core/cuda/blas.h"

#include <limits>

#include <memory>

#include "core/cuda/allocator.h"
#include "core/cuda/check.h"
#include "core/cuda/context.h"
#include "core/cuda/kernels.h"

namespace pd::cuda {

namespace {

int to_int(int64_t v, const char* what) {
  PD_CHECK(v >= 0 && v <= std::numeric_limits<int>::max(), "cuBLAS ", what, " = ", v, " exceeds int range");
  return static_cast<int>(v);
}

// Elements spanned by a row-major matrix that op() turns into rows x cols.
int64_t span(bool trans, int64_t rows, int64_t cols, int64_t ld) {
  const int64_t r = trans ? cols : rows, c = trans ? rows : cols;
  return r == 0 || c == 0 ? 0 : (r - 1) * ld + c;
}

}  // namespace

Bf16Copy::Bf16Copy(const float* x, int64_t n)
    : s_(device_allocator().allocate(static_cast<size_t>(n > 0 ? n : 1) * 2)) {
  kernels::pack_bf16(n, x, static_cast<uint16_t*>(s_->data), context().compute);
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* A,
               int64_t lda, const uint16_t* B, int64_t ldb, float beta, void* C, bool c_bf16, int64_t ldc) {
  if (M == 0 || N == 0) return;
  CUBLAS_CHECK(cublasGemmEx(context().cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                            to_int(N, "N"), to_int(M, "M"), to_int(K, "K"), &alpha, B, CUDA_R_16BF, to_int(ldb, "ldb"),
                            A, CUDA_R_16BF, to_int(lda, "lda"), &beta, C, c_bf16 ? CUDA_R_16BF : CUDA_R_32F,
                            to_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: swap the
// operands and M/N, keep the transposition flags.
void gemm(Precision p, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  Context& c = context();
  if (p == Precision::BF16 && K > 0) {
    Bf16Copy a(A, span(trans_a, M, K, lda)), b(B, span(trans_b, K, N, ldb));
    CUBLAS_CHECK(cublasGemmEx(c.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                              to_int(N, "N"), to_int(M, "M"), to_int(K, "K"), &alpha, b.get(), CUDA_R_16BF,
                              to_int(ldb, "ldb"), a.get(), CUDA_R_16BF, to_int(lda, "lda"), &beta, C, CUDA_R_32F,
                              to_int(ldc, "ldc"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  CUBLAS_CHECK(cublasSgemm(c.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                           to_int(N, "N"), to_int(M, "M"), to_int(K, "K"), &alpha, B, to_int(ldb, "ldb"), A,
                           to_int(lda, "lda"), &beta, C, to_int(ldc, "ldc")));
}

void gemm_strided_batched(Precision p, bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                          const float* A, int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b,
                          float beta, float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  if (M == 0 || N == 0 || batch == 0) return;
  Context& c = context();
  if (p == Precision::BF16 && K > 0) {
    Bf16Copy a(A, (batch - 1) * stride_a + span(trans_a, M, K, lda)),
        b(B, (batch - 1) * stride_b + span(trans_b, K, N, ldb));
    CUBLAS_CHECK(cublasGemmStridedBatchedEx(
        c.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(N, "N"),
        to_int(M, "M"), to_int(K, "K"), &alpha, b.get(), CUDA_R_16BF, to_int(ldb, "ldb"), stride_b, a.get(),
        CUDA_R_16BF, to_int(lda, "lda"), stride_a, &beta, C, CUDA_R_32F, to_int(ldc, "ldc"), stride_c,
        to_int(batch, "batch"), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    return;
  }
  CUBLAS_CHECK(cublasSgemmStridedBatched(c.cublas, trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, to_int(N, "N"), to_int(M, "M"),
                                         to_int(K, "K"), &alpha, B, to_int(ldb, "ldb"), stride_b, A,
                                         to_int(lda, "lda"), stride_a, &beta, C, to_int(ldc, "ldc"), stride_c,
                                         to_int(batch, "batch")));
}

}  // namespace pd::cuda
