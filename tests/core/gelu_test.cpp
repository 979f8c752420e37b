#include <gtest/gtest.h>

#include "core/cpu/fast_math.h"
#include "core/cpu/gelu_kernels.h"
#include "core/layers.h"
#include "tests/core/sequence_reference.h"

namespace pd {
namespace {

TEST(FastMath, ExpAndTanhAreAccurateAndSaturate) {
  for (float x = -80.0f; x < 80.0f; x += 0.37f) {
    double want = std::exp(double(x));
    EXPECT_NEAR(cpu::exp_approx(x), want, 4e-7 * want) << x;
  }
  for (float u = -20.0f; u < 20.0f; u += 0.013f) EXPECT_NEAR(cpu::tanh_approx(u), std::tanh(double(u)), 3e-7) << u;
  EXPECT_EQ(cpu::tanh_approx(1e6f), 1.0f);
  EXPECT_EQ(cpu::tanh_approx(-1e6f), -1.0f);
  EXPECT_EQ(cpu::exp_approx(-1e6f) < 1e-37f, true);
}

TEST(GeluKernels, MatchNaiveLoops) {
  const int64_t n = 1003;
  auto x = testing::random_vec(n, 1, 6.0f), dy = testing::random_vec(n, 2);
  std::vector<float> y(n), dx(n);
  cpu::gelu_forward(x.data(), y.data(), n);
  cpu::gelu_backward(x.data(), dy.data(), dx.data(), n);
  std::vector<double> ry(n), rdx(n);
  for (int64_t i = 0; i < n; ++i) {
    ry[i] = testing::gelu_ref(x[i]);
    double v = x[i], k = std::sqrt(2.0 / M_PI), t = std::tanh(k * (v + 0.044715 * v * v * v));
    rdx[i] = dy[i] * (0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * 0.044715 * v * v));
  }
  EXPECT_LT(testing::rel_err(y.data(), ry), 1e-6);
  EXPECT_LT(testing::rel_err(dx.data(), rdx), 5e-6);
}

TEST(Gelu, BackwardMatchesFiniteDifferences) {
  testing::gradcheck(*make_gelu(), testing::random_tensor({3, 5, 4}, 3, 3.0f));
}

TEST(Gelu, SkipsInputGradWhenAsked) {
  LayerPtr g = make_gelu();
  LayerContext ctx;
  Tensor x = testing::random_tensor({4}, 1);
  Tensor y = g->forward({{}, {}, {}}, x, ctx);
  EXPECT_FALSE(g->backward({{}, {}, {}, false}, y, ctx).defined());
}

}  // namespace
}  // namespace pd
