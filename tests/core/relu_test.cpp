#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/cpu/elementwise_kernels.h"
#include "core/layers.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

TEST(ElementwiseKernels, ReluForwardBackwardAndAddRelu) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x{-2, -0.5f, 0, 0.5f, 3, nan}, y(6), dx(6);
  std::vector<float> dy{1, 2, 3, 4, 5, 6};
  cpu::relu_forward(6, x.data(), y.data());
  EXPECT_EQ(std::vector<float>(y.begin(), y.begin() + 5), (std::vector<float>{0, 0, 0, 0.5f, 3}));
  EXPECT_TRUE(std::isnan(y[5]));  // as torch.relu
  cpu::relu_backward(6, y.data(), dy.data(), dx.data());
  EXPECT_EQ(dx, (std::vector<float>{0, 0, 0, 4, 5, 0}));
  std::vector<float> b{1, 1, 1, 1, -4, 0}, s(6);
  cpu::add_relu_forward(5, x.data(), b.data(), s.data());
  EXPECT_EQ(std::vector<float>(s.begin(), s.begin() + 5), (std::vector<float>{0, 0.5f, 1, 1.5f, 0}));
  cpu::add_into(5, b.data(), dy.data());
  EXPECT_EQ(std::vector<float>(b.begin(), b.begin() + 5), (std::vector<float>{2, 3, 4, 5, 1}));
}

TEST(ReluLayer, GradientMatchesFiniteDifferences) {
  // Keep inputs away from the kink at 0 (|x| >= 0.1 > step).
  Tensor x = testing::random_tensor({3, 4, 5}, 1);
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] += x.f32()[i] < 0 ? -0.1f : 0.1f;
  testing::gradcheck(*make_relu(), x);
}

TEST(ReluLayer, LargeInputsSplitAcrossThreadsMatchSerialLoop) {
  const int64_t n = (1 << 16) + 3;
  Tensor x = testing::random_tensor({n}, 2);
  LayerPtr relu = make_relu();
  LayerContext ctx;
  Tensor y = relu->forward({{}, {}, {}}, x, ctx);
  Tensor dx = relu->backward({{}, {}, {}}, x, ctx);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(y.f32()[i], std::max(0.0f, x.f32()[i]));
    ASSERT_EQ(dx.f32()[i], x.f32()[i] > 0 ? x.f32()[i] : 0.0f);
  }
}

}  // namespace
}  // namespace pd
