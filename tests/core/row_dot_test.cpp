#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/cpu/row_dot_kernels.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

// Every block shape (2 or 1 rows of a, 4..1 rows of b) and lane tail.
TEST(RowDotKernels, AccumulateMatchesNaiveDotProducts) {
  for (int64_t M : {1, 2, 5})
    for (int64_t N : {1, 3, 4, 7})
      for (int64_t L : {1, 8, 19, 64}) {
        const int64_t ld = L + 3;
        Tensor a = testing::random_tensor({M, ld}, 1), b = testing::random_tensor({N, ld}, 2);
        std::vector<float> c(M * N, 0.5f);
        cpu::accumulate_row_dots(M, N, L, a.f32(), b.f32(), ld, c.data());
        for (int64_t i = 0; i < M; ++i)
          for (int64_t j = 0; j < N; ++j) {
            double want = 0.5;
            for (int64_t t = 0; t < L; ++t) want += double(a.f32()[i * ld + t]) * b.f32()[j * ld + t];
            ASSERT_NEAR(c[i * N + j], want, 1e-5 * (1 + std::fabs(want))) << M << "x" << N << " L" << L;
          }
      }
}

}  // namespace
}  // namespace pd
