#include <gtest/gtest.h>

#include <cstring>

#include "core/cpu/dropout_kernels.h"
#include "core/error.h"
#include "core/layers.h"
#include "tests/core/sequence_reference.h"

namespace pd {
namespace {

StepInfo step(uint64_t mb, bool training = true) {
  StepInfo s;
  s.training = training;
  s.seed = 11;
  s.layer_index = 4;
  s.minibatch_id = mb;
  return s;
}

Tensor run(const Layer& l, const Tensor& x, const StepInfo& s) {
  LayerContext ctx;
  return l.forward({{}, {}, s}, x, ctx);
}

TEST(DropoutKernels, MatchThePerElementFormula) {
  const int64_t n = 1001;
  auto x = testing::random_vec(n, 1);
  std::vector<float> y(n);
  cpu::DropoutKey k{11, 4, 9, 2};
  cpu::dropout_apply(k, 0.3f, x.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    float want = cpu::dropout_keep(k, 0.3f, i) ? x[i] / 0.7f : 0.0f;
    EXPECT_FLOAT_EQ(y[i], want) << i;
  }
}

// The kernel draws 8 Philox blocks at a time (AVX2); every element must still be
// the per-element formula's, in full groups and the ragged end, with a
// 64-bit seed and a substream in the counter's high word.
TEST(DropoutKernels, GroupsOfBlocksMatchThePerElementFormulaBitwise) {
  for (int64_t n : {int64_t{64}, int64_t{65}, int64_t{127}, int64_t{4096 + 60}}) {
    auto x = testing::random_vec(n, 7);
    std::vector<float> y(n);
    const cpu::DropoutKey k{0x123456789ABCDEF0ull, 77, 4000000000u, 5};
    cpu::dropout_apply(k, 0.1f, x.data(), y.data(), n);
    const float scale = 1.0f / 0.9f;
    for (int64_t i = 0; i < n; ++i) {
      const float want = cpu::dropout_keep(k, 0.1f, static_cast<uint64_t>(i)) ? x[i] * scale : 0.0f;
      ASSERT_EQ(std::memcmp(&y[i], &want, sizeof(float)), 0) << "n " << n << ", element " << i;
    }
  }
}

TEST(Dropout, MaskIsAPureFunctionOfSeedLayerAndMinibatch) {
  LayerPtr d = make_dropout(0.5f);
  Tensor x = Tensor::full({64, 100}, 1.0f);
  Tensor a = run(*d, x, step(3)), b = run(*d, x, step(3)), c = run(*d, x, step(4));
  EXPECT_TRUE(testing::bitwise_equal(a, b));
  EXPECT_FALSE(testing::bitwise_equal(a, c));
  StepInfo other_layer = step(3);
  other_layer.layer_index = 5;
  EXPECT_FALSE(testing::bitwise_equal(a, run(*d, x, other_layer)));
  // Kept elements are scaled by 1/(1-p); about p of them are dropped.
  int64_t dropped = 0;
  for (float v : a.to_floats()) {
    EXPECT_TRUE(v == 0.0f || v == 2.0f);
    dropped += v == 0.0f;
  }
  EXPECT_NEAR(double(dropped) / 6400, 0.5, 0.03);
  // Element i does not depend on how many elements there are (any slicing
  // of the work sees the same mask).
  Tensor first = run(*d, Tensor::full({10}, 1.0f), step(3));
  for (int64_t i = 0; i < 10; ++i) EXPECT_EQ(first.f32()[i], a.f32()[i]);
}

TEST(Dropout, IsIdentityInEvalAndValidatesP) {
  LayerPtr d = make_dropout(0.5f);
  Tensor x = testing::random_tensor({50}, 2);
  EXPECT_TRUE(testing::bitwise_equal(run(*d, x, step(3, false)), x));
  EXPECT_THROW(make_dropout(1.0f), UserError);
  EXPECT_THROW(make_dropout(-0.1f), UserError);
}

TEST(Dropout, BackwardUsesTheForwardMask) {
  LayerPtr d = make_dropout(0.25f);
  Tensor x = testing::random_tensor({7, 9}, 3);
  Tensor dy = testing::random_tensor({7, 9}, 4);
  LayerContext ctx;
  Tensor y = d->forward({{}, {}, step(8)}, x, ctx);
  // Backward is told a different minibatch: the mask recorded by forward wins.
  Tensor dx = d->backward({{}, {}, step(9), true}, dy, ctx);
  for (int64_t i = 0; i < x.numel(); ++i) {
    bool kept = y.f32()[i] != 0.0f;
    EXPECT_FLOAT_EQ(dx.f32()[i], kept ? dy.f32()[i] / 0.75f : 0.0f);
  }
  testing::gradcheck(*d, x);
}

}  // namespace
}  // namespace pd
