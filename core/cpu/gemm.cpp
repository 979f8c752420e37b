#include "core/cpu/gemm.h"

#include <omp.h>

#include <algorithm>

#include "core/cpu/openblas_library.h"
#include "core/error.h"

namespace pd::cpu {

namespace {

int g_threads = 1;

// Below this many multiply-adds a GEMM runs on the calling thread: the
// fork/join would cost more than the second thread saves.
constexpr int64_t kParallelMinMnk = int64_t{1} << 20;
constexpr int64_t kPartsPerThread = 2;

void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  openblas().sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans, trans_b ? CblasTrans : CblasNoTrans,
              static_cast<int>(M), static_cast<int>(N), static_cast<int>(K), alpha, A, static_cast<int>(lda), B,
              static_cast<int>(ldb), beta, C, static_cast<int>(ldc));
}

// [begin, end) of part `i` of `parts` over `n`, cut at multiples of `grain`.
std::pair<int64_t, int64_t> part_of(int64_t n, int64_t grain, int parts, int i) {
  const int64_t blocks = (n + grain - 1) / grain;
  const int64_t b0 = blocks * i / parts, b1 = blocks * (i + 1) / parts;
  return {std::min(n, b0 * grain), std::min(n, b1 * grain)};
}

}  // namespace

// Each thread computes a block of C's rows (or columns, whichever dimension
// is longer) with the full K, so every element is summed in the order a
// single-threaded GEMM uses: the bits do not depend on the thread count.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const int threads = g_threads;
  const bool split = threads > 1 && !omp_in_parallel() && M * N * K >= kParallelMinMnk &&
                     std::max(M, N) >= 2 * 16;
  if (!split) return sgemm(trans_a, trans_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  const bool by_rows = M >= N;
  // More parts than threads, taken as threads come free: on a busy machine
  // a thread the scheduler starts late then holds up less of the GEMM.
  // Each part's values do not depend on which thread computes it.
  const int64_t length = by_rows ? M : N;
  const int parts = static_cast<int>(std::min<int64_t>(kPartsPerThread * threads, (length + 15) / 16));
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (int i = 0; i < parts; ++i) {
    if (by_rows) {
      const auto [m0, m1] = part_of(M, 16, parts, i);
      const float* a = trans_a ? A + m0 : A + m0 * lda;
      if (m1 > m0) sgemm(trans_a, trans_b, m1 - m0, N, K, alpha, a, lda, B, ldb, beta, C + m0 * ldc, ldc);
    } else {
      const auto [n0, n1] = part_of(N, 16, parts, i);
      const float* b = trans_b ? B + n0 * ldb : B + n0;
      if (n1 > n0) sgemm(trans_a, trans_b, M, n1 - n0, K, alpha, A, lda, b, ldb, beta, C + n0, ldc);
    }
  }
}

void set_compute_threads(int n) {
  if (n < 1 || n > kMaxComputeThreads)
    throw UserError(cat("thread count must be in [1, ", kMaxComputeThreads, "], got ", n));
  g_threads = n;
  omp_set_num_threads(n);
}

int compute_threads() { return g_threads; }

}  // namespace pd::cpu
