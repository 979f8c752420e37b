#pragma once
// Row-major single-precision GEMM through OpenBLAS, and the thread count
// that every CPU kernel uses. With a fixed thread count results are
// bitwise reproducible (GEMMs are split across OpenMP threads by blocks of
// C, each run by a single-threaded OpenBLAS; our own loops use OpenMP
// static schedules and reduce across threads, if at all, in a fixed order).
// Called inside an OpenMP parallel region, gemm runs on the calling thread.
#include <cstdint>

namespace pd::cpu {

// C[M,N] = alpha * op(A)[M,K] * op(B)[K,N] + beta * C. Row-major; lda/ldb/ldc
// are the row strides of A, B, C as stored.
void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Most compute threads a process may ask for: OpenMP crashes on tens of
// thousands of threads, and past a thousand no machine we target speeds up.
constexpr int kMaxComputeThreads = 1024;

// Sets OpenBLAS and OpenMP threads for this process (1..kMaxComputeThreads,
// else a UserError).
void set_compute_threads(int n);
int compute_threads();

}  // namespace pd::cpu
