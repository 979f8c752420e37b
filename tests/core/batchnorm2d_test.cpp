#include <gtest/gtest.h>

#include <cmath>

#include "core/cpu/batchnorm_kernels.h"
#include "core/error.h"
#include "core/layers.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

using testing::random_tensor;

struct Bn {
  LayerPtr layer;
  std::vector<Tensor> params, buffers;
  explicit Bn(int64_t c, float momentum = 0.1f) : layer(make_batchnorm2d(c, 1e-5f, momentum)) {
    params = allocate_params(*layer);
    buffers = allocate_buffers(*layer);
    layer->init(params, buffers, CounterRng(1, 0, 0));
  }
  Tensor forward(const Tensor& x, bool training, LayerContext& ctx) {
    StepInfo step;
    step.training = training;
    return layer->forward({params, buffers, step}, x, ctx);
  }
};

TEST(BatchNormKernels, TrainingForwardMatchesNaiveStatistics) {
  const int64_t N = 3, C = 4, P = 10;
  Tensor x = random_tensor({N, C, 2, 5}, 1, 3.0f), g = random_tensor({C}, 2), b = random_tensor({C}, 3);
  Tensor y = Tensor::empty(x.shape()), mean = Tensor::empty({C}), var = Tensor::empty({C}), is = Tensor::empty({C});
  cpu::batchnorm2d_forward_train({N, C, P}, x.f32(), g.f32(), b.f32(), 1e-5f, y.f32(), mean.f32(), var.f32(), is.f32());
  for (int64_t c = 0; c < C; ++c) {
    double m = 0, v = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < P; ++p) m += x.f32()[(n * C + c) * P + p];
    m /= N * P;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < P; ++p) v += std::pow(x.f32()[(n * C + c) * P + p] - m, 2);
    v /= N * P;
    EXPECT_NEAR(mean.f32()[c], m, 1e-6);
    EXPECT_NEAR(var.f32()[c], v, 1e-5);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t p = 0; p < P; ++p) {
        int64_t i = (n * C + c) * P + p;
        EXPECT_NEAR(y.f32()[i], (x.f32()[i] - m) / std::sqrt(v + 1e-5) * g.f32()[c] + b.f32()[c], 1e-5);
      }
  }
}

TEST(BatchNorm2dLayer, RunningStatisticsFollowPyTorchUpdate) {
  // One channel, values 1, 2, 3, 6: mean 3, biased var 3.5, unbiased var 14/3.
  Bn bn(1);
  LayerContext ctx;
  Tensor x = Tensor::from_floats({1, 2, 3, 6}, {2, 1, 1, 2});
  Tensor y = bn.forward(x, true, ctx);
  EXPECT_FLOAT_EQ(bn.buffers[0].f32()[0], 0.1f * 3.0f);
  EXPECT_FLOAT_EQ(bn.buffers[1].f32()[0], 0.9f * 1.0f + 0.1f * (14.0f / 3.0f));
  EXPECT_NEAR(y.f32()[0], (1 - 3) / std::sqrt(3.5 + 1e-5), 1e-6);
  // A second step moves again from the updated values.
  LayerContext ctx2;
  bn.forward(x, true, ctx2);
  EXPECT_FLOAT_EQ(bn.buffers[0].f32()[0], 0.9f * 0.3f + 0.1f * 3.0f);
  // Eval uses the running statistics and leaves them alone.
  float rm = bn.buffers[0].f32()[0], rv = bn.buffers[1].f32()[0];
  LayerContext ctx3;
  Tensor ye = bn.forward(x, false, ctx3);
  EXPECT_NEAR(ye.f32()[3], (6 - rm) / std::sqrt(rv + 1e-5), 1e-5);
  EXPECT_EQ(bn.buffers[0].f32()[0], rm);
  EXPECT_EQ(bn.buffers[1].f32()[0], rv);
}

TEST(BatchNorm2dLayer, InitAndNames) {
  Bn bn(3);
  auto specs = bn.layer->param_specs(), bufs = bn.layer->buffer_specs();
  ASSERT_EQ(specs.size(), 2u);
  EXPECT_EQ(specs[0].name, "weight");
  EXPECT_EQ(specs[1].name, "bias");
  ASSERT_EQ(bufs.size(), 2u);
  EXPECT_EQ(bufs[0].name, "running_mean");
  EXPECT_EQ(bufs[1].name, "running_var");
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(bn.params[0].f32()[c], 1.0f);
    EXPECT_EQ(bn.params[1].f32()[c], 0.0f);
    EXPECT_EQ(bn.buffers[0].f32()[c], 0.0f);
    EXPECT_EQ(bn.buffers[1].f32()[c], 1.0f);
  }
  EXPECT_THROW(bn.layer->output_shape({4, 5, 5}), UserError);
  LayerContext ctx;
  EXPECT_THROW(bn.forward(Tensor::zeros({1, 3, 1, 1}), true, ctx), UserError);  // one value per channel
}

TEST(BatchNorm2dLayer, GradientsMatchFiniteDifferencesInTrainingAndEval) {
  LayerPtr bn = make_batchnorm2d(3);
  std::vector<Tensor> params{random_tensor({3}, 4, 1.5f), random_tensor({3}, 5)};
  testing::gradcheck(*bn, random_tensor({4, 3, 3, 2}, 6, 2.0f), {}, params);
  testing::GradCheckOptions eval;
  eval.training = false;
  testing::gradcheck(*bn, random_tensor({2, 3, 2, 2}, 7), eval, params);
}

TEST(BatchNorm2dLayer, NoInputGradientWhenNotWanted) {
  Bn bn(2);
  LayerContext ctx;
  Tensor y = bn.forward(random_tensor({2, 2, 3, 3}, 1), true, ctx);
  std::vector<Tensor> grads{Tensor::zeros({2}), Tensor::zeros({2})};
  EXPECT_FALSE(bn.layer->backward({bn.params, grads, {}, false}, random_tensor(y.shape(), 2), ctx).defined());
  EXPECT_NE(grads[1].f32()[0], 0.0f);
}

}  // namespace
}  // namespace pd
