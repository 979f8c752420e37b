// cuBLAS GEMM against a naive double-precision loop.
// Tolerance: atol 1e-4 + rtol 1e-4 for K <= 100 with inputs in [-1, 1]
// (FP32 accumulation error is about K * 6e-8; TF32 is off by default).
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
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

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA
