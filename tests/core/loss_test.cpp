#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/loss.h"
#include "core/precision.h"

namespace pd {
namespace {

TEST(SoftmaxCrossEntropy, MatchesHandValues) {
  // Row 0: logits (1, 2, 3), label 2; row 1: (0, 0, 0), label 0.
  Tensor logits = Tensor::from_floats({1, 2, 3, 0, 0, 0}, {2, 3});
  Tensor labels = Tensor::from_ints({2, 0}, {2});
  LossResult r = softmax_cross_entropy(logits, labels);
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  const double l0 = std::log(z) - 3.0, l1 = std::log(3.0);
  EXPECT_NEAR(r.loss, (l0 + l1) / 2, 1e-6);
  EXPECT_EQ(r.count, 2);
  EXPECT_EQ(r.correct, 2);  // row 1 ties: argmax is the first, 0 == label
  ASSERT_EQ(r.grad.shape(), logits.shape());
  const float* g = r.grad.f32();
  EXPECT_NEAR(g[0], std::exp(1.0) / z / 2, 1e-7);
  EXPECT_NEAR(g[1], std::exp(2.0) / z / 2, 1e-7);
  EXPECT_NEAR(g[2], (std::exp(3.0) / z - 1) / 2, 1e-7);
  EXPECT_NEAR(g[3], (1.0 / 3 - 1) / 2, 1e-7);
  EXPECT_NEAR(g[4], 1.0 / 6, 1e-7);
}

TEST(SoftmaxCrossEntropy, StableForHugeLogitsAndGradSumsToZero) {
  Tensor logits = Tensor::from_floats({1000, -1000, 0, 1e4f, 1e4f - 1, 0}, {2, 3});
  Tensor labels = Tensor::from_ints({1, 1}, {2});
  LossResult r = softmax_cross_entropy(logits, labels);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_NEAR(r.loss, (2000 + (1 + std::log1p(std::exp(-1.0)))) / 2, 1e-2);
  for (int row = 0; row < 2; ++row) {
    double s = 0;
    for (int c = 0; c < 3; ++c) s += r.grad.f32()[row * 3 + c];
    EXPECT_NEAR(s, 0.0, 1e-7);
  }
  EXPECT_EQ(r.correct, 0);
}

TEST(SoftmaxCrossEntropy, LeadingDimsAreRowsAndGradIsOptional) {
  // [2, 2, 2] logits: 4 rows of 2 classes.
  Tensor logits = Tensor::from_floats({0, 1, 1, 0, 2, 0, 0, 2}, {2, 2, 2});
  Tensor labels = Tensor::from_ints({1, 0, 0, 0}, {2, 2});
  LossResult r = softmax_cross_entropy(logits, labels, false);
  EXPECT_FALSE(r.grad.defined());
  EXPECT_EQ(r.count, 4);
  EXPECT_EQ(r.correct, 3);
  const double a = std::log1p(std::exp(-1.0)), b = std::log1p(std::exp(-2.0));
  EXPECT_NEAR(r.loss, (a + a + b + (2 + b)) / 4, 1e-6);
}

TEST(SoftmaxCrossEntropy, GradientMatchesFiniteDifferences) {
  std::vector<float> v;
  for (int i = 0; i < 15; ++i) v.push_back(std::sin(i * 1.7f) * 3);
  Tensor logits = Tensor::from_floats(v, {3, 5});
  Tensor labels = Tensor::from_ints({4, 0, 2}, {3});
  LossResult r = softmax_cross_entropy(logits, labels);
  for (int i = 0; i < 15; ++i) {
    const float keep = logits.f32()[i], h = 1e-2f;
    logits.f32()[i] = keep + h;
    double lp = softmax_cross_entropy(logits, labels, false).loss;
    logits.f32()[i] = keep - h;
    double lm = softmax_cross_entropy(logits, labels, false).loss;
    logits.f32()[i] = keep;
    EXPECT_NEAR(r.grad.f32()[i], (lp - lm) / (2 * h), 2e-3) << i;
  }
}

// Handed-over logits that nothing else holds take their gradient in place,
// with the bits of the copying form; logits still held elsewhere (a view, a
// copy of the handle) are left as they were. F32 and bf16 logits alike.
TEST(SoftmaxCrossEntropy, HandedOverLogitsTakeTheirGradientInPlace) {
  const Tensor labels = Tensor::from_ints({2, 0, 1}, {3});
  const std::vector<float> v{1.5f, -2.0f, 0.25f, 3.0f, 0.0f, -1.0f, 0.5f, 0.5f, 2.0f};
  for (DType dt : {DType::F32, DType::BF16}) {
    SCOPED_TRACE(dtype_name(dt));
    auto logits_of = [&] {
      Tensor t = Tensor::empty({3, 3}, dt);
      for (size_t i = 0; i < v.size(); ++i) {
        if (dt == DType::F32) t.f32()[i] = v[i];
        else t.bf16()[i] = bf16_bits(v[i]);
      }
      return t;
    };
    const Tensor kept = logits_of();
    const LossResult copying = softmax_cross_entropy(kept, labels);

    Tensor sole = logits_of();
    const void* storage = sole.raw();
    const LossResult in_place = softmax_cross_entropy(std::move(sole), labels);
    EXPECT_EQ(in_place.grad.raw(), storage) << "the gradient went elsewhere";
    EXPECT_EQ(in_place.loss, copying.loss);
    EXPECT_EQ(in_place.grad.dtype(), dt);
    EXPECT_EQ(in_place.grad.to_floats(), copying.grad.to_floats());

    Tensor shared = logits_of();
    const Tensor view = shared.reshape({9});
    const LossResult aside = softmax_cross_entropy(std::move(shared), labels);
    EXPECT_NE(aside.grad.raw(), view.raw());
    EXPECT_EQ(view.to_floats(), kept.to_floats()) << "logits held elsewhere were overwritten";
    EXPECT_EQ(aside.grad.to_floats(), copying.grad.to_floats());
  }
}

TEST(SoftmaxCrossEntropy, BadLabelsAreUserErrors) {
  Tensor logits = Tensor::zeros({2, 3});
  EXPECT_THROW(softmax_cross_entropy(logits, Tensor::from_ints({0, 3}, {2})), UserError);
  EXPECT_THROW(softmax_cross_entropy(logits, Tensor::from_ints({0, -1}, {2})), UserError);
  EXPECT_THROW(softmax_cross_entropy(logits, Tensor::from_ints({0}, {1})), UserError);
}

// The loss runs through the device's table on every device: the CPU's
// entry is the same computation, and checks labels itself (a RuntimeFailure
// for a caller that skipped the loss's own UserError check).
TEST(SoftmaxCrossEntropy, TheCpuTableEntryIsTheLoss) {
  const DeviceOps& ops = cpu_device_ops();
  ASSERT_NE(ops.softmax_cross_entropy, nullptr);
  Tensor logits = Tensor::from_floats({1, 2, 3, 0.5f, -1, 4}, {2, 3});
  Tensor labels = Tensor::from_ints({2, 0}, {2});
  LossResult r = softmax_cross_entropy(logits, labels);
  std::vector<float> grad(6);
  double sum = 0;
  int64_t correct = 0;
  ops.softmax_cross_entropy(2, 3, logits.f32(), labels.data<int32_t>(), 0.5f, grad.data(), &sum, &correct);
  EXPECT_EQ(static_cast<float>(sum / 2), r.loss);
  EXPECT_EQ(correct, r.correct);
  EXPECT_EQ(grad, r.grad.to_floats());
  const int32_t bad[2] = {2, 3};
  EXPECT_THROW(ops.softmax_cross_entropy(2, 3, logits.f32(), bad, 0.5f, nullptr, &sum, &correct), RuntimeFailure);
}

TEST(AverageGradients, DividesLikeTheCpuAlways) {
  ASSERT_NE(cpu_device_ops().divide, nullptr);
  std::vector<float> x = {1.0f, 2.0f, 1e-3f, -7.0f}, y(4);
  cpu_device_ops().divide(4, 3.0f, x.data(), y.data());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(y[i], x[i] / 3.0f);
}

}  // namespace
}  // namespace pd
