// The B and W passes over a layer range (backward_input_layers, then
// backward_weights_layers), which zero-bubble schedules run at different
// times, train the same model as backward_layers: bitwise the same input
// gradient and parameter gradients, on whole zoo models, with and without
// the input gradient; and the B pass leaves the parameter gradients of
// every layer that splits its backward to the W pass.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/cpu/gemm.h"
#include "models/layer_range.h"
#include "models/parameters.h"

namespace pd {
namespace {

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || (a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

Tensor random_like(const Shape& s, uint64_t key) {
  Tensor t = Tensor::empty(s);
  CounterRng rng(3, 1, key);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = rng.normal(static_cast<uint64_t>(i));
  return t;
}

// Runs [first, last] forward, then backward fused or split; returns dx.
Tensor run(const Model& m, const ParameterStore& w, ParameterStore& grads, int first, int last, const Tensor& x,
           const Tensor& dy_or_empty, bool need_input_grad, bool split, Tensor* y_out) {
  StepInfo step{.training = true, .seed = 11, .minibatch_id = 2};
  RangeContext ctx;
  Tensor y = forward_layers(m, w, first, last, x, step, ctx);
  if (y_out) *y_out = y;
  const Tensor dy = dy_or_empty.defined() ? dy_or_empty : random_like(y.shape(), 9);
  if (!split) return backward_layers(m, w, grads, first, last, dy, step, ctx, need_input_grad);
  Tensor dx = backward_input_layers(m, w, grads, first, last, dy, step, ctx, need_input_grad);
  for (int i = first; i <= last; ++i)
    if (m.layer(i).defers_weight_gradient())
      for (const Tensor& g : grads.params(i))
        for (int64_t k = 0; k < g.numel(); ++k)
          if (g.f32()[k] != 0.0f) {
            ADD_FAILURE() << "layer " << i << " (" << m.layer(i).describe() << ") wrote gradients in the B pass";
            break;
          }
  backward_weights_layers(m, w, grads, first, last, step, ctx);
  EXPECT_TRUE(ctx.layers.empty()) << "the W pass consumes the range's context";
  return dx;
}

void expect_b_then_w_equals_backward(const Model& m, const Tensor& x, int first) {
  const int last = m.size() - 1;
  ParameterStore w = ParameterStore::create(m, first, last, 11);
  // The range's input: the model's input for first = 0, else layer first's
  // output of a forward over [0, first - 1].
  Tensor in = x;
  if (first > 0) {
    ParameterStore below = ParameterStore::create(m, 0, first - 1, 11);
    RangeContext c;
    in = forward_layers(m, below, 0, first - 1, x, StepInfo{.training = true, .seed = 11, .minibatch_id = 2}, c);
  }
  for (bool need_input_grad : {true, false}) {
    SCOPED_TRACE(m.name + " layers [" + std::to_string(first) + ", " + std::to_string(last) + "]" +
                 (need_input_grad ? " with dx" : " without dx"));
    ParameterStore fused_grads = w.zeros_like_params(), split_grads = w.zeros_like_params();
    Tensor y;
    const Tensor fused_dx = run(m, w, fused_grads, first, last, in, Tensor(), need_input_grad, false, &y);
    const Tensor dy = random_like(y.shape(), 9);
    const Tensor split_dx = run(m, w, split_grads, first, last, in, dy, need_input_grad, true, nullptr);
    EXPECT_TRUE(bitwise_equal(fused_dx, split_dx)) << "input gradient differs";
    const auto& names = fused_grads.param_names();
    for (size_t i = 0; i < names.size(); ++i)
      EXPECT_TRUE(bitwise_equal(fused_grads.all_params()[i], split_grads.all_params()[i])) << names[i];
  }
}

Tensor images(int64_t n, const Shape& sample) {
  Shape s = sample;
  s.insert(s.begin(), n);
  return random_like(s, 1);
}

class LayerRangeSplit : public ::testing::Test {
 protected:
  void SetUp() override {
    keep_ = cpu::compute_threads();
    cpu::set_compute_threads(1);
  }
  void TearDown() override { cpu::set_compute_threads(keep_); }
  int keep_ = 1;
};

TEST_F(LayerRangeSplit, CnnBThenWEqualsBackward) {
  const Model m = build_model(zoo_spec("cnn"));
  const Tensor x = images(3, m.input_shape);
  expect_b_then_w_equals_backward(m, x, 0);
  expect_b_then_w_equals_backward(m, x, 1);  // a relu first: B stops at the first layer with parameters
}

TEST_F(LayerRangeSplit, GptMiniBThenWEqualsBackward) {
  const Model m = build_model(zoo_spec("gpt-mini", {{"vocab", 50}, {"context", 8}, {"width", 16}, {"depth", 2},
                                                   {"heads", 2}, {"dropout", 0.1}}));
  Tensor tokens = Tensor::empty({2, 8}, DType::I32);
  for (int64_t i = 0; i < tokens.numel(); ++i) tokens.data<int32_t>()[i] = static_cast<int32_t>((i * 7) % 50);
  expect_b_then_w_equals_backward(m, tokens, 0);
  expect_b_then_w_equals_backward(m, tokens, 1);  // a stage of transformer blocks
}

TEST_F(LayerRangeSplit, ResnetBThenWEqualsBackward) {
  const Model m = build_model(zoo_spec("resnet18", {{"width", 0.125}, {"image_size", 32}, {"classes", 10}}));
  const Tensor x = images(2, m.input_shape);
  expect_b_then_w_equals_backward(m, x, 0);
  expect_b_then_w_equals_backward(m, x, 3);
}

}  // namespace
}  // namespace pd
