// Optimizer updates and LR schedules against values worked out by hand
// from PyTorch's update rules.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/optimizer.h"
#include "core/rng.h"

namespace pd {
namespace {

// Runs one optimizer on a single scalar parameter through the given grads;
// returns the parameter after each step.
std::vector<float> run_scalar(const OptimizerConfig& c, float p0, const std::vector<float>& grads) {
  auto opt = make_optimizer(c);
  std::vector<Tensor> params{Tensor::from_floats({p0}, {1})};
  OptimizerState st = opt->make_state(params);
  std::vector<float> out;
  for (float g : grads) {
    std::vector<Tensor> gs{Tensor::from_floats({g}, {1})};
    opt->step(params, gs, st, c.lr);
    out.push_back(params[0].f32()[0]);
  }
  return out;
}

TEST(Sgd, PlainStepIsLrTimesGrad) {
  OptimizerConfig c{.kind = OptimizerKind::sgd, .lr = 0.5f};
  EXPECT_FLOAT_EQ(run_scalar(c, 2.0f, {3.0f})[0], 0.5f);  // 2 - 0.5*3
}

TEST(Sgd, MomentumAndWeightDecay) {
  // d1 = 0.5 + 0.1*1 = 0.6, buf = 0.6, p = 1 - 0.06 = 0.94
  // d2 = 0.5 + 0.1*0.94 = 0.594, buf = 0.9*0.6 + 0.594 = 1.134, p = 0.94 - 0.1134
  OptimizerConfig c{.kind = OptimizerKind::sgd, .lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.1f};
  auto p = run_scalar(c, 1.0f, {0.5f, 0.5f});
  EXPECT_FLOAT_EQ(p[0], 0.94f);
  EXPECT_FLOAT_EQ(p[1], 0.8266f);
}

TEST(Sgd, Nesterov) {
  // buf1 = 1, update 1 + 0.9*1 = 1.9 -> 0.81; buf2 = 1.9, update 1 + 0.9*1.9 = 2.71 -> 0.539
  OptimizerConfig c{.kind = OptimizerKind::sgd, .lr = 0.1f, .momentum = 0.9f, .nesterov = true};
  auto p = run_scalar(c, 1.0f, {1.0f, 1.0f});
  EXPECT_FLOAT_EQ(p[0], 0.81f);
  EXPECT_NEAR(p[1], 0.539f, 1e-6);
}

TEST(Sgd, StateHoldsMomentumBuffer) {
  OptimizerConfig c{.kind = OptimizerKind::sgd, .lr = 0.1f, .momentum = 0.9f};
  auto opt = make_optimizer(c);
  std::vector<Tensor> params{Tensor::from_floats({1.0f, 2.0f}, {2})};
  OptimizerState st = opt->make_state(params);
  ASSERT_EQ(st.slots.size(), 1u);
  std::vector<Tensor> g{Tensor::from_floats({1.0f, -1.0f}, {2})};
  opt->step(params, g, st, 0.1f);
  opt->step(params, g, st, 0.1f);
  EXPECT_EQ(st.step, 2);
  EXPECT_FLOAT_EQ(st.slots[0].f32()[0], 1.9f);
  EXPECT_FLOAT_EQ(st.slots[0].f32()[1], -1.9f);
  EXPECT_FLOAT_EQ(params[0].f32()[1], 2.0f + 0.1f + 0.19f);
}

TEST(Adam, TwoStepsMatchHandComputation) {
  // Step 1: m=0.05, v=2.5e-4, bias-corrected m/sqrt(v) = 1 -> p = 0.9.
  // Step 2 (g=0.25): m=0.07, v=3.1225e-4, m^=0.07/0.19, v^=3.1225e-4/0.001999
  //   p = 0.9 - 0.1 * 0.368421 / 0.395225 = 0.806782
  OptimizerConfig c{.kind = OptimizerKind::adam, .lr = 0.1f};
  auto p = run_scalar(c, 1.0f, {0.5f, 0.25f});
  EXPECT_NEAR(p[0], 0.9f, 1e-6);
  EXPECT_NEAR(p[1], 0.806782f, 2e-6);
}

TEST(Adam, WeightDecayIsL2ButAdamWDecouples) {
  // Adam: the L2 term joins the gradient; the first step still moves by lr.
  OptimizerConfig adam{.kind = OptimizerKind::adam, .lr = 0.1f, .weight_decay = 0.1f};
  EXPECT_NEAR(run_scalar(adam, 1.0f, {0.5f})[0], 0.9f, 1e-6);
  // AdamW: p *= 1 - lr*wd (0.99), then the Adam step of lr: 0.89.
  OptimizerConfig adamw{.kind = OptimizerKind::adamw, .lr = 0.1f, .weight_decay = 0.1f};
  EXPECT_NEAR(run_scalar(adamw, 1.0f, {0.5f})[0], 0.89f, 1e-6);
  // With a gradient pointing against the decay the two differ in sign of change.
  EXPECT_NE(run_scalar(adam, 1.0f, {-0.05f})[0], run_scalar(adamw, 1.0f, {-0.05f})[0]);
}

TEST(Optimizer, RejectsBadConfig) {
  EXPECT_THROW(make_optimizer({.kind = OptimizerKind::sgd, .lr = -1.0f}), UserError);
  EXPECT_THROW(make_optimizer({.kind = OptimizerKind::sgd, .momentum = 1.5f}), UserError);
  EXPECT_THROW(make_optimizer({.kind = OptimizerKind::sgd, .nesterov = true}), UserError);
  EXPECT_THROW(make_optimizer({.kind = OptimizerKind::adam, .beta2 = 1.0f}), UserError);
  EXPECT_THROW(make_optimizer({.kind = OptimizerKind::adam, .momentum = 0.9f}), UserError);
}

TEST(Optimizer, KindSpellingsRoundTrip) {
  for (OptimizerKind k : {OptimizerKind::sgd, OptimizerKind::adam, OptimizerKind::adamw})
    EXPECT_TRUE(parse_optimizer_kind(to_string(k)) == k) << to_string(k);
  EXPECT_STREQ(to_string(OptimizerKind::adamw), "adamw");
  EXPECT_FALSE(parse_optimizer_kind("rmsprop").has_value());
  EXPECT_FALSE(parse_optimizer_kind("SGD").has_value());
}

TEST(LrSchedule, KindSpellingsRoundTrip) {
  for (LrShape k : {LrShape::constant, LrShape::step, LrShape::cosine})
    EXPECT_TRUE(parse_lr_schedule_kind(to_string(k)) == k) << to_string(k);
  EXPECT_STREQ(to_string(LrShape::cosine), "cosine");
  EXPECT_FALSE(parse_lr_schedule_kind("linear").has_value());
}

TEST(LrSchedule, ConstantWithWarmup) {
  LrSchedule s{.kind = LrShape::constant, .base_lr = 0.1f, .warmup_steps = 4};
  validate(s);
  EXPECT_FLOAT_EQ(s.lr_at(0), 0.025f);
  EXPECT_FLOAT_EQ(s.lr_at(1), 0.05f);
  EXPECT_FLOAT_EQ(s.lr_at(3), 0.1f);
  EXPECT_FLOAT_EQ(s.lr_at(100), 0.1f);
}

TEST(LrSchedule, StepDecay) {
  LrSchedule s{.kind = LrShape::step, .base_lr = 1.0f, .step_size = 3, .gamma = 0.5f};
  validate(s);
  EXPECT_FLOAT_EQ(s.lr_at(0), 1.0f);
  EXPECT_FLOAT_EQ(s.lr_at(2), 1.0f);
  EXPECT_FLOAT_EQ(s.lr_at(3), 0.5f);
  EXPECT_FLOAT_EQ(s.lr_at(6), 0.25f);
  // Decay counts from the end of the warm-up.
  LrSchedule w{.kind = LrShape::step, .base_lr = 1.0f, .warmup_steps = 2, .step_size = 3, .gamma = 0.5f};
  EXPECT_FLOAT_EQ(w.lr_at(0), 0.5f);
  EXPECT_FLOAT_EQ(w.lr_at(4), 1.0f);
  EXPECT_FLOAT_EQ(w.lr_at(5), 0.5f);
}

TEST(LrSchedule, Cosine) {
  LrSchedule s{.kind = LrShape::cosine, .base_lr = 1.0f, .total_steps = 10, .min_lr = 0.0f};
  validate(s);
  EXPECT_FLOAT_EQ(s.lr_at(0), 1.0f);
  EXPECT_NEAR(s.lr_at(5), 0.5f, 1e-6);
  EXPECT_NEAR(s.lr_at(10), 0.0f, 1e-6);
  EXPECT_NEAR(s.lr_at(50), 0.0f, 1e-6);
  LrSchedule w{.kind = LrShape::cosine, .base_lr = 1.0f, .warmup_steps = 2, .total_steps = 12, .min_lr = 0.2f};
  validate(w);
  EXPECT_FLOAT_EQ(w.lr_at(0), 0.5f);
  EXPECT_FLOAT_EQ(w.lr_at(2), 1.0f);
  EXPECT_NEAR(w.lr_at(7), 0.6f, 1e-6);
  EXPECT_NEAR(w.lr_at(12), 0.2f, 1e-6);
}

TEST(LrSchedule, RejectsBadValues) {
  EXPECT_THROW(validate(LrSchedule{.kind = LrShape::step, .step_size = 0}), UserError);
  EXPECT_THROW(validate(LrSchedule{.kind = LrShape::cosine, .warmup_steps = 5, .total_steps = 5}), UserError);
  EXPECT_THROW(validate(LrSchedule{.kind = LrShape::constant, .warmup_steps = -1}), UserError);
}

TEST(Optimizer, StepIntoIsBitwiseCopyThenStepAndLeavesTheSourceAlone) {
  // Weight stashing writes the new version beside the old one; it must be
  // exactly the in-place update (the runtime's bitwise --reference checks
  // rely on it). 2,500 elements: whole chunks of the streamed path and a tail.
  const std::vector<OptimizerConfig> configs = {
      {.kind = OptimizerKind::sgd, .lr = 0.1f, .weight_decay = 0.01f},
      {.kind = OptimizerKind::sgd, .lr = 0.1f, .momentum = 0.9f, .weight_decay = 0.01f, .nesterov = true},
      {.kind = OptimizerKind::adam, .lr = 0.01f, .weight_decay = 0.01f},
      {.kind = OptimizerKind::adamw, .lr = 0.01f, .weight_decay = 0.01f}};
  constexpr int64_t n = 2500;
  auto values = [](uint32_t stream) {
    CounterRng rng(7, stream, 0);
    std::vector<float> v(n);
    for (int64_t k = 0; k < n; ++k) v[static_cast<size_t>(k)] = rng.normal(static_cast<uint64_t>(k));
    return v;
  };
  for (const OptimizerConfig& c : configs) {
    auto opt = make_optimizer(c);
    std::vector<Tensor> in_place{Tensor::from_floats(values(0), {n})};
    std::vector<Tensor> source{in_place[0].clone()}, target{Tensor::zeros({n})};
    OptimizerState st_in_place = opt->make_state(in_place), st_into = opt->make_state(source);
    for (uint32_t step = 0; step < 3; ++step) {
      std::vector<Tensor> g{Tensor::from_floats(values(1 + step), {n})};
      opt->step(in_place, g, st_in_place, c.lr);
      const Tensor before = source[0].clone();
      opt->step_into(source, target, g, st_into, c.lr);
      EXPECT_EQ(std::memcmp(source[0].raw(), before.raw(), n * sizeof(float)), 0) << to_string(c.kind) << ": source changed";
      EXPECT_EQ(std::memcmp(target[0].raw(), in_place[0].raw(), n * sizeof(float)), 0) << to_string(c.kind) << " step " << step;
      std::swap(source, target);
    }
  }
}

}  // namespace
}  // namespace pd

namespace pd {
namespace {

// Gradient clipping: the norm as torch.nn.utils.clip_grad_norm_ defines it,
// the same bits however the tensors are split or ordered, and PyTorch's scaling.
std::vector<Tensor> random_tensors(const std::vector<int64_t>& sizes, uint64_t seed) {
  std::vector<Tensor> out;
  const CounterRng rng(seed, 0, 0);
  uint64_t next = 0;
  for (int64_t n : sizes) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = 4.0f * rng.uniform(next++) - 2.0f;
    out.push_back(Tensor::from_floats(v, {n}));
  }
  return out;
}

TEST(GradientClipping, SquaredNormsAreEachTensorsSumOfSquares) {
  // 4096-element blocks: sizes below, at and across a block boundary, and empty.
  const std::vector<int64_t> sizes{1, 4096, 4097, 3 * 4096 + 17, 0, 100'000};
  const std::vector<Tensor> g = random_tensors(sizes, 7);
  const std::vector<double> squares = squared_norms(g);
  ASSERT_EQ(squares.size(), sizes.size());
  for (size_t i = 0; i < g.size(); ++i) {
    long double want = 0;
    for (int64_t k = 0; k < g[i].numel(); ++k) want += static_cast<long double>(g[i].f32()[k]) * g[i].f32()[k];
    EXPECT_NEAR(squares[i], static_cast<double>(want), 1e-12 * static_cast<double>(want) + 1e-30) << "tensor " << i;
  }
  EXPECT_EQ(squares[4], 0.0);
}

TEST(GradientClipping, SquaredNormsDoNotDependOnTheThreadCount) {
  const std::vector<Tensor> g = random_tensors({1'000'003, 70'000}, 8);
  const int before = cpu::compute_threads();
  cpu::set_compute_threads(1);
  const std::vector<double> one = squared_norms(g);
  cpu::set_compute_threads(3);
  const std::vector<double> two = squared_norms(g);
  cpu::set_compute_threads(before);
  EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(double)), 0);
}

TEST(GradientClipping, GlobalNormIsTheSameBitsInAnyOrderOrSplit) {
  std::vector<double> squares;
  const CounterRng rng(9, 0, 0);
  for (uint64_t i = 0; i < 200; ++i) squares.push_back(std::pow(10.0, -12.0 + 18.0 * rng.uniform(i)));
  const double whole = global_norm(squares);
  // Stages hand their sums over in another order: same bits.
  std::vector<double> shuffled(squares.rbegin(), squares.rend());
  std::rotate(shuffled.begin(), shuffled.begin() + 77, shuffled.end());
  EXPECT_EQ(global_norm(shuffled), whole);
  long double want = 0;
  for (double s : squares) want += s;
  EXPECT_NEAR(whole, std::sqrt(static_cast<double>(want)), 1e-12 * whole);
}

TEST(GradientClipping, ScalesByMaxNormOverNormOnlyWhenThatIsBelowOne) {
  std::vector<Tensor> g{Tensor::from_floats({3.0f, 0.0f}, {2}), Tensor::from_floats({4.0f}, {1})};
  const double norm = global_norm(squared_norms(g));
  EXPECT_EQ(norm, 5.0);
  // Above the norm: untouched, factor 1.
  EXPECT_EQ(clip_to_norm(g, norm, 6.0f), 1.0f);
  EXPECT_EQ(g[0].f32()[0], 3.0f);
  // PyTorch: max_norm / (norm + 1e-6), applied to every tensor.
  const float factor = clip_to_norm(g, norm, 1.0f);
  EXPECT_EQ(factor, static_cast<float>(1.0 / (5.0 + 1e-6)));
  EXPECT_EQ(g[0].f32()[0], 3.0f * factor);
  EXPECT_EQ(g[0].f32()[1], 0.0f);
  EXPECT_EQ(g[1].f32()[0], 4.0f * factor);
  EXPECT_NEAR(global_norm(squared_norms(g)), 1.0, 1e-6);
  EXPECT_THROW(clip_to_norm(g, norm, 0.0f), std::logic_error);
}

}  // namespace
}  // namespace pd
