// cuBLAS GEMM against a naive double-precision loop.
// Tolerance: atol 1e-4 + rtol 1e-4 for K <= 100 with inputs in [-1, 1]
// (FP32 accumulation error is about K * 6e-8; TF32 is off by default).
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include "core/cuda/blas.h"

#include <cmath>
#include <cstring>
#include <iterator>

#include "core/precision.h"
#include "tests/gpu/gpu_test.h"
#include "tests/gpu/reference.h"

namespace pd::gputest {

using CudaGemm = GpuTest;

TEST_F(CudaGemm, AllTransposesWithStridesAlphaAndBeta) {
  const int64_t M = 37, N = 53, K = 71;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      // Padded leading dimensions catch a swapped lda/ldb.
      int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
      auto A = random_floats((ta ? K : M) * lda, 10 + ta);
      auto B = random_floats((tb ? N : K) * ldb, 20 + tb);
      auto C = random_floats(M * ldc, 30);
      Tensor dA = on_gpu(A), dB = on_gpu(B), dC = on_gpu(C);
      ops->gemm(ta, tb, M, N, K, 0.75f, dA.f32(), lda, dB.f32(), ldb, 0.5f, dC.f32(), ldc);
      auto want = ref::gemm(ta, tb, M, N, K, 0.75, A, lda, B, ldb, 0.5, C, ldc);
      EXPECT_TRUE(close(host(dC), want, 1e-4, 1e-4)) << "trans_a " << ta << " trans_b " << tb;
    }
}

TEST_F(CudaGemm, StridedBatchedMatchesPerMatrixGemm) {
  // Attention shapes: scores = Q K^T per (batch, head).
  const int64_t batch = 6, T = 19, hd = 16;
  auto Q = random_floats(batch * T * hd, 1), Kt = random_floats(batch * T * hd, 2);
  Tensor dQ = on_gpu(Q), dK = on_gpu(Kt), dS = gpu_zeros(batch * T * T);
  ops->gemm_strided_batched(false, true, T, T, hd, 0.25f, dQ.f32(), hd, T * hd, dK.f32(), hd, T * hd, 0.0f,
                            dS.f32(), T, T * T, batch);
  std::vector<double> want;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<float> q(Q.begin() + b * T * hd, Q.begin() + (b + 1) * T * hd);
    std::vector<float> k(Kt.begin() + b * T * hd, Kt.begin() + (b + 1) * T * hd);
    auto s = ref::gemm(false, true, T, T, hd, 0.25, q, hd, k, hd, 0.0, std::vector<float>(T * T), T);
    want.insert(want.end(), s.begin(), s.end());
  }
  EXPECT_TRUE(close(host(dS), want, 1e-5, 1e-4));
}

TEST_F(CudaGemm, RepeatedCallsAreBitwiseIdentical) {
  const int64_t M = 128, N = 96, K = 200;
  auto A = random_floats(M * K, 3), B = random_floats(K * N, 4);
  Tensor dA = on_gpu(A), dB = on_gpu(B), c1 = gpu_zeros(M * N), c2 = gpu_zeros(M * N);
  ops->gemm(false, false, M, N, K, 1.0f, dA.f32(), K, dB.f32(), N, 0.0f, c1.f32(), N);
  ops->gemm(false, false, M, N, K, 1.0f, dA.f32(), K, dB.f32(), N, 0.0f, c2.f32(), N);
  EXPECT_EQ(host(c1), host(c2));
}

// --precision bf16: operands that are bf16 values go through bf16 tensor
// cores exactly (their products are exact in FP32), so the result is the
// FP32 GEMM's to FP32 accumulation error, for every transposition and for
// the strided-batched form; values that are not bf16 are rounded first.
static std::vector<float> bf16_values(size_t n, uint32_t key) {
  auto v = random_floats(n, key);
  for (float& x : v) x = round_to_bf16(x);
  return v;
}

// The bf16 path of the backend's GEMMs (what the linear and attention
// entries run under BF16); the table's gemm entries compute in FP32.
using CudaGemmBf16 = GpuTest;

TEST_F(CudaGemmBf16, BfloatOperandsGiveTheFp32Result) {
  const int64_t M = 37, N = 53, K = 300;
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      int64_t lda = (ta ? M : K) + 3, ldb = (tb ? K : N) + 5, ldc = N + 2;
      auto A = bf16_values((ta ? K : M) * lda, 40 + ta), B = bf16_values((tb ? N : K) * ldb, 50 + tb);
      auto C = random_floats(M * ldc, 60);
      Tensor dA = on_gpu(A), dB = on_gpu(B), dC = on_gpu(C);
      cuda::gemm(Precision::BF16, ta, tb, M, N, K, 0.75f, dA.f32(), lda, dB.f32(), ldb, 0.5f, dC.f32(), ldc);
      auto want = ref::gemm(ta, tb, M, N, K, 0.75, A, lda, B, ldb, 0.5, C, ldc);
      EXPECT_TRUE(close(host(dC), want, 1e-4, 1e-4)) << "trans_a " << ta << " trans_b " << tb;
    }
  const int64_t batch = 5, T = 33, hd = 64;
  auto Q = bf16_values(batch * T * hd, 70), Kt = bf16_values(batch * T * hd, 71);
  Tensor dQ = on_gpu(Q), dK = on_gpu(Kt), dS = gpu_zeros(batch * T * T), dS2 = gpu_zeros(batch * T * T);
  cuda::gemm_strided_batched(Precision::BF16, false, true, T, T, hd, 0.125f, dQ.f32(), hd, T * hd, dK.f32(), hd, T * hd,
                             0.0f, dS.f32(), T, T * T, batch);
  cuda::gemm_strided_batched(Precision::BF16, false, true, T, T, hd, 0.125f, dQ.f32(), hd, T * hd, dK.f32(), hd, T * hd,
                             0.0f, dS2.f32(), T, T * T, batch);
  std::vector<double> want;
  for (int64_t b = 0; b < batch; ++b) {
    std::vector<float> q(Q.begin() + b * T * hd, Q.begin() + (b + 1) * T * hd);
    std::vector<float> k(Kt.begin() + b * T * hd, Kt.begin() + (b + 1) * T * hd);
    auto s = ref::gemm(false, true, T, T, hd, 0.125, q, hd, k, hd, 0.0, std::vector<float>(T * T), T);
    want.insert(want.end(), s.begin(), s.end());
  }
  EXPECT_TRUE(close(host(dS), want, 1e-5, 1e-4));
  EXPECT_EQ(host(dS), host(dS2));
}

TEST_F(CudaGemmBf16, OtherOperandsAreRoundedToNearestEven) {
  const int64_t M = 8, N = 8, K = 16;
  auto A = random_floats(M * K, 80), B = random_floats(K * N, 81);
  std::vector<float> Ar(A), Br(B);
  for (float& x : Ar) x = round_to_bf16(x);
  for (float& x : Br) x = round_to_bf16(x);
  Tensor dA = on_gpu(A), dB = on_gpu(B), dC = gpu_zeros(M * N);
  cuda::gemm(Precision::BF16, false, false, M, N, K, 1.0f, dA.f32(), K, dB.f32(), N, 0.0f, dC.f32(), N);
  auto want = ref::gemm(false, false, M, N, K, 1.0, Ar, K, Br, N, 0.0, std::vector<float>(M * N), N);
  EXPECT_TRUE(close(host(dC), want, 1e-5, 1e-5));
}

TEST_F(CudaGemmBf16, RoundKernelMatchesTheHostRule) {
  std::vector<float> x = random_floats(4099, 90, -1e4f, 1e4f);
  const float specials[] = {0.0f, -0.0f, 1.0f + 1.0f / 256, 1.0f + 3.0f / 256, 3.3895314e38f, -3.3895314e38f,
                            1e-40f, -1e-42f, INFINITY, -INFINITY, NAN};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  Tensor d = on_gpu(x);
  ops->round_bf16(static_cast<int64_t>(x.size()), d.f32(), d.f32());
  auto got = host(d);
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = round_to_bf16(x[i]);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      uint32_t a, b;
      std::memcpy(&a, &got[i], 4);
      std::memcpy(&b, &want, 4);
      EXPECT_EQ(a, b) << "x = " << x[i];
    }
  }
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA
