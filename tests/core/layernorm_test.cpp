#include <gtest/gtest.h>

#include "core/cpu/layernorm_kernels.h"
#include "core/error.h"
#include "core/layers.h"
#include "tests/core/sequence_reference.h"

namespace pd {
namespace {

TEST(LayerNormKernels, MatchNaiveLoops) {
  const int64_t R = 9, D = 130;
  const double eps = 1e-5;
  auto x = testing::random_vec(R * D, 1, 3.0f), w = testing::random_vec(D, 2), b = testing::random_vec(D, 3);
  auto dy = testing::random_vec(R * D, 4);
  for (int64_t i = 0; i < R * D; ++i) x[i] += 5.0f;  // an offset the variance must not feel
  std::vector<float> y(R * D), mean(R), rstd(R), dx(R * D), dw(D, 1.0f), db(D, 1.0f);
  cpu::layernorm_forward(x.data(), w.data(), b.data(), y.data(), mean.data(), rstd.data(), R, D, 1e-5f);
  cpu::layernorm_backward(x.data(), w.data(), mean.data(), rstd.data(), dy.data(), dx.data(), dw.data(),
                          db.data(), R, D);
  std::vector<double> ry(R * D), rdx(R * D), rdw(D, 1.0), rdb(D, 1.0);
  for (int64_t r = 0; r < R; ++r) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < D; ++c) m += x[r * D + c];
    m /= D;
    for (int64_t c = 0; c < D; ++c) v += (x[r * D + c] - m) * (x[r * D + c] - m);
    double rs = 1.0 / std::sqrt(v / D + eps);
    std::vector<double> xh(D), g(D);
    double mg = 0, mgx = 0;
    for (int64_t c = 0; c < D; ++c) {
      xh[c] = (x[r * D + c] - m) * rs;
      ry[r * D + c] = xh[c] * w[c] + b[c];
      g[c] = double(dy[r * D + c]) * w[c];
      mg += g[c] / D;
      mgx += g[c] * xh[c] / D;
      rdw[c] += dy[r * D + c] * xh[c];
      rdb[c] += dy[r * D + c];
    }
    for (int64_t c = 0; c < D; ++c) rdx[r * D + c] = rs * (g[c] - mg - xh[c] * mgx);
  }
  EXPECT_LT(testing::rel_err(y.data(), ry), 1e-5);
  EXPECT_LT(testing::rel_err(dx.data(), rdx), 1e-5);
  EXPECT_LT(testing::rel_err(dw.data(), rdw), 1e-5);
  EXPECT_LT(testing::rel_err(db.data(), rdb), 1e-5);
}

TEST(LayerNorm, InitIsOneAndZeroAndShapesAreChecked) {
  LayerPtr l = make_layernorm(8);
  auto p = testing::init_params(*l);
  for (float v : p[0].to_floats()) EXPECT_EQ(v, 1.0f);
  for (float v : p[1].to_floats()) EXPECT_EQ(v, 0.0f);
  EXPECT_THROW(l->output_shape({3, 7}), UserError);
  EXPECT_EQ(l->output_shape({3, 8}), (Shape{3, 8}));
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  LayerPtr l = make_layernorm(6);
  // Non-trivial weight and bias so their gradients and dx's w term are exercised.
  std::vector<Tensor> p{testing::random_tensor({6}, 20), testing::random_tensor({6}, 21)};
  testing::gradcheck(*l, testing::random_tensor({2, 3, 6}, 22, 2.0f), {}, p);
}

}  // namespace
}  // namespace pd
