#include "core/cpu/gemm.h"

#include <omp.h>
#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/cpu/openblas_library.h"
#include "core/error.h"

namespace pd::cpu {

namespace {

int g_threads = 1;

// Below this many multiply-adds a GEMM runs on the calling thread: the
// fork/join would cost more than the second thread saves.
constexpr int64_t kParallelMinMnk = int64_t{1} << 20;
constexpr int64_t kPartsPerThread = 2;

// OpenBLAS's work buffer: one per thread inside sgemm at once, mapped on
// first need and kept (BUFFER_SIZE of its x86_64 build, 128 MiB, plus a
// page pair). When the mmap fails, OpenBLAS retries it forever at full
// CPU: so while a finite address-space limit (ulimit -v, prlimit --as)
// is set, check that `threads` buffers still fit before the first call.
constexpr size_t kOpenBlasBufferBytes = (size_t{32} << 22) + 8192;
std::mutex g_room_mu;
std::atomic<int> g_room_checked{0};  // buffers known to fit (or RLIMIT_AS unlimited)

// The message of a failure to make room, empty when there is room.
std::string make_openblas_room(int threads) {
  rlimit as{};
  if (::getrlimit(RLIMIT_AS, &as) != 0 || as.rlim_cur == RLIM_INFINITY) {
    g_room_checked = kMaxComputeThreads;
    return {};
  }
  openblas();  // its own mapping (tens of MB) comes first
  const size_t need = static_cast<size_t>(threads) * kOpenBlasBufferBytes;
  void* room = ::mmap(nullptr, need, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (room != MAP_FAILED) {
    ::munmap(room, need);
    g_room_checked = threads;
    return {};
  }
  return cat("out of memory: OpenBLAS needs ", need >> 20, " MiB of address space for the work buffers of ", threads,
             threads == 1 ? " compute thread" : " compute threads", " (", kOpenBlasBufferBytes >> 20,
             " MiB each), which the address-space limit of ", as.rlim_cur >> 20,
             " MiB (ulimit -v, prlimit --as) does not leave; raise the limit or use fewer threads");
}

void check_openblas_room(int threads) {
  std::string why;
  try {
    std::lock_guard<std::mutex> lock(g_room_mu);
    if (g_room_checked.load() >= threads) return;
    why = make_openblas_room(threads);
  } catch (const std::exception& e) {  // OpenBLAS could not be loaded
    if (!omp_in_parallel()) throw;
    why = e.what();
  }
  if (why.empty()) return;
  // Inside a kernel's parallel region an exception cannot leave the thread.
  if (omp_in_parallel()) {
    std::fprintf(stderr, "error: %s\n", why.c_str());
    std::_Exit(1);
  }
  throw RuntimeFailure(why);
}

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
  if (g_room_checked.load(std::memory_order_relaxed) < threads) check_openblas_room(threads);
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
