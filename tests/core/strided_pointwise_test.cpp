// The CPU table's strided pointwise entries on what the ONNX ops' gradient
// checks do not reach: operands read through non-dense strides, sums to a
// non-contiguous set of kept dimensions in the documented order (from +0,
// increasing output index), and the empty output.
#include <gtest/gtest.h>

#include <vector>

#include "core/device_ops.h"
#include "core/rng.h"

namespace pd {
namespace {

std::vector<float> random_values(size_t n, uint32_t key) {
  CounterRng r(7, key, 1);
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 2.0f * r.uniform(i) - 1.0f;
  return v;
}

TEST(StridedPointwise, BinaryReadsTransposedAndBroadcastOperands) {
  // out [3, 4]: a is a [4, 3] tensor read transposed, b a column [3, 1].
  const int64_t shape[] = {3, 4}, sa[] = {1, 3}, sb[] = {1, 0};
  const auto a = random_values(12, 1), b = random_values(3, 2);
  std::vector<float> y(12);
  cpu_device_ops().broadcast_binary(BinaryArith::Sub, 2, shape, sa, sb, a.data(), b.data(), y.data());
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) EXPECT_EQ(y[size_t(i * 4 + j)], a[size_t(j * 3 + i)] - b[size_t(i)]) << i << "," << j;
}

TEST(StridedPointwise, SumsOverOuterAndInnerDimsInIncreasingIndexOrder) {
  // x [3, 2, 5, 4] summed to [1, 2, 1, 4]: the kept dimensions are not adjacent.
  const int64_t shape[] = {3, 2, 5, 4}, ys[] = {0, 4, 0, 1};
  const auto x = random_values(120, 3);
  std::vector<float> y(8, 42.0f);  // overwritten
  cpu_device_ops().reduce_sum_strided(4, shape, ys, x.data(), y.data());
  for (int c = 0; c < 2; ++c)
    for (int e = 0; e < 4; ++e) {
      float want = 0.0f;
      for (int a = 0; a < 3; ++a)
        for (int d = 0; d < 5; ++d) want += x[size_t(((a * 2 + c) * 5 + d) * 4 + e)];
      EXPECT_EQ(y[size_t(c * 4 + e)], want) << c << "," << e;  // the same order: the same bits
    }
}

TEST(StridedPointwise, MulGradientOfAMiddleBroadcastIsTheSumOfItsTerms) {
  // out [2, 3, 4] = a [2, 1, 4] * b [3, 1].
  const int64_t shape[] = {2, 3, 4}, sa[] = {4, 0, 1}, sb[] = {0, 1, 0};
  const auto a = random_values(8, 4), b = random_values(3, 5), dy = random_values(24, 6);
  std::vector<float> da(8, 9.0f), db(3, 9.0f);
  cpu_device_ops().broadcast_binary_backward(BinaryArith::Mul, 3, shape, sa, sb, a.data(), b.data(), dy.data(),
                                             da.data(), db.data());
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 4; ++k) {
      double want = 0;
      for (int j = 0; j < 3; ++j) want += double(dy[size_t((i * 3 + j) * 4 + k)]) * b[size_t(j)];
      EXPECT_NEAR(da[size_t(i * 4 + k)], want, 1e-6);
    }
  for (int j = 0; j < 3; ++j) {
    double want = 0;
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) want += double(dy[size_t((i * 3 + j) * 4 + k)]) * a[size_t(i * 4 + k)];
    EXPECT_NEAR(db[size_t(j)], want, 1e-6);
  }
}

TEST(StridedPointwise, AnEmptyOutputSumsToZeros) {
  const int64_t shape[] = {2, 0, 3}, ys[] = {0, 0, 1};
  std::vector<float> y(3, 5.0f);
  const float x = 0.0f;
  cpu_device_ops().reduce_sum_strided(3, shape, ys, &x, y.data());
  EXPECT_EQ(y, std::vector<float>(3, 0.0f));
}

}  // namespace
}  // namespace pd
