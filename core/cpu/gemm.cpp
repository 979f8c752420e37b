#include "core/cpu/gemm.h"

#include <cblas.h>
#include <omp.h>

#include "core/error.h"

namespace pd::cpu {

namespace {
int g_threads = 1;
}

void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A,
              static_cast<int>(lda), B, static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

void set_compute_threads(int n) {
  if (n < 1) throw UserError(cat("thread count must be at least 1, got ", n));
  g_threads = n;
  openblas_set_num_threads(n);
  omp_set_num_threads(n);
}

int compute_threads() { return g_threads; }

}  // namespace pd::cpu
