// Zero-bubble schedules run a layer's backward in two passes: B
// (backward_input: dx, as soon as the stage below needs it) and later W
// (backward_weights: the parameter gradients). The split must train the
// same model: for every layer type, B then W gives bitwise the dx and
// parameter gradients of the fused backward, with and without the input
// gradient (a first stage skips dx, but W still needs what B keeps), and
// every layer with parameters really defers them to W.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/layers.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

using testing::random_tensor;

struct Gradients {
  Tensor dx;
  std::vector<Tensor> params;
};

bool all_zero(const Tensor& t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (t.f32()[i] != 0.0f) return false;
  return true;
}

Gradients run_backward(const Layer& layer, const std::vector<Tensor>& params, const Tensor& x, const Tensor& dy,
                       bool need_input_grad, bool split, bool training) {
  std::vector<Tensor> buffers = allocate_buffers(layer), unused = allocate_params(layer);
  layer.init(unused, buffers, CounterRng(7, 0, 0));
  StepInfo step;
  step.training = training;
  step.seed = 5;
  step.minibatch_id = 3;
  LayerContext ctx;
  layer.forward({params, buffers, step}, x, ctx);
  Gradients g;
  for (const Tensor& p : params) g.params.push_back(Tensor::zeros(p.shape()));
  const BackwardArgs args{params, g.params, step, need_input_grad};
  if (!split) {
    g.dx = layer.backward(args, dy, ctx);
  } else {
    g.dx = layer.backward_input(args, dy, ctx);
    if (layer.defers_weight_gradient())
      for (size_t i = 0; i < g.params.size(); ++i)
        EXPECT_TRUE(all_zero(g.params[i])) << layer.describe() << ": B pass wrote gradient " << i;
    layer.backward_weights({params, g.params, step, false}, ctx);
  }
  EXPECT_TRUE(ctx.saved.empty() && ctx.children.empty()) << layer.describe() << ": context not consumed";
  return g;
}

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  if (!a.defined()) return true;
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

void expect_split_matches_fused(const Layer& layer, const Tensor& x, bool training = true) {
  SCOPED_TRACE(layer.describe() + (training ? " (training)" : " (eval)"));
  EXPECT_EQ(layer.defers_weight_gradient(), !layer.param_specs().empty())
      << "every layer with parameters splits its backward; the others keep the fused default";
  std::vector<Tensor> params = allocate_params(layer), buffers = allocate_buffers(layer);
  layer.init(params, buffers, CounterRng(7, 0, 0));
  Shape out = layer.output_shape({x.shape().begin() + 1, x.shape().end()});
  out.insert(out.begin(), x.dim(0));
  const Tensor dy = random_tensor(out, 77);
  for (bool need_input_grad : {true, false}) {
    SCOPED_TRACE(need_input_grad ? "with dx" : "without dx");
    const Gradients fused = run_backward(layer, params, x, dy, need_input_grad, false, training);
    const Gradients split = run_backward(layer, params, x, dy, need_input_grad, true, training);
    EXPECT_TRUE(bitwise_equal(fused.dx, split.dx)) << "dx differs";
    if (need_input_grad && layer.input_dtype() == DType::F32) EXPECT_TRUE(split.dx.defined());
    ASSERT_EQ(fused.params.size(), split.params.size());
    for (size_t i = 0; i < fused.params.size(); ++i)
      EXPECT_TRUE(bitwise_equal(fused.params[i], split.params[i]))
          << "gradient of " << layer.param_specs()[i].name << " differs";
  }
}

void every_layer_type() {
  expect_split_matches_fused(*make_linear(12, 5), random_tensor({3, 12}, 1));
  expect_split_matches_fused(*make_linear(8, 6, false), random_tensor({2, 4, 8}, 2));
  expect_split_matches_fused(*make_conv2d(3, 4, 3, 1, 1), random_tensor({2, 3, 6, 6}, 3));
  expect_split_matches_fused(*make_conv2d(1, 8, 5, 1, 2), random_tensor({4, 1, 12, 12}, 4));
  expect_split_matches_fused(*make_conv2d(3, 4, 3, 2, 1, false), random_tensor({2, 3, 7, 7}, 5));
  expect_split_matches_fused(*make_conv2d(8, 16, 1, 1, 0), random_tensor({6, 8, 5, 5}, 6));  // pointwise
  expect_split_matches_fused(*make_conv2d(4, 4, 3, 1, 1), random_tensor({2, 4, 2, 2}, 7));   // dense path
  // Big enough for the threaded chunks (batch >= threads, 2^20 multiply-adds).
  expect_split_matches_fused(*make_conv2d(16, 32, 3, 1, 1), random_tensor({8, 16, 16, 16}, 8));
  expect_split_matches_fused(*make_conv2d(16, 32, 3, 2, 1), random_tensor({8, 16, 16, 16}, 9));
  expect_split_matches_fused(*make_batchnorm2d(3), random_tensor({4, 3, 5, 5}, 10));
  expect_split_matches_fused(*make_batchnorm2d(3), random_tensor({4, 3, 5, 5}, 11), false);
  expect_split_matches_fused(*make_layernorm(8), random_tensor({2, 5, 8}, 12));
  expect_split_matches_fused(*make_embedding(11, 8, 6), Tensor::from_ints({1, 4, 4, 0, 10, 3, 2, 2, 9, 1}, {2, 5}));
  expect_split_matches_fused(*make_causal_self_attention(8, 2), random_tensor({2, 5, 8}, 13));
  expect_split_matches_fused(*make_transformer_block(8, 2), random_tensor({2, 5, 8}, 14));
  expect_split_matches_fused(*make_transformer_block(8, 2, 0.1f), random_tensor({2, 5, 8}, 15));
  expect_split_matches_fused(*make_resnet_basic_block(4, 8, 2), random_tensor({2, 4, 8, 8}, 16));
  expect_split_matches_fused(*make_resnet_basic_block(4, 4, 1), random_tensor({2, 4, 6, 6}, 17));
  expect_split_matches_fused(*make_resnet_bottleneck_block(4, 2, 8, 1), random_tensor({2, 4, 6, 6}, 18));
  // Layers without parameters keep the fused default (their W is empty).
  expect_split_matches_fused(*make_relu(), random_tensor({2, 3, 4}, 19));
  expect_split_matches_fused(*make_gelu(), random_tensor({2, 3, 4}, 20));
  expect_split_matches_fused(*make_dropout(0.25f), random_tensor({2, 3, 4}, 21));
  expect_split_matches_fused(*make_maxpool2d(2), random_tensor({2, 3, 6, 6}, 22));
  expect_split_matches_fused(*make_avgpool2d(3, 2, 1), random_tensor({2, 3, 7, 7}, 23));
  expect_split_matches_fused(*make_adaptive_avgpool2d(2, 3), random_tensor({2, 3, 5, 7}, 24));
  expect_split_matches_fused(*make_flatten(), random_tensor({2, 3, 4, 2}, 25));
}

TEST(BackwardSplit, EveryLayerTypeGivesTheFusedBitsOnOneThread) {
  const int keep = cpu::compute_threads();
  cpu::set_compute_threads(1);
  every_layer_type();
  cpu::set_compute_threads(keep);
}

TEST(BackwardSplit, EveryLayerTypeGivesTheFusedBitsOnThreeThreads) {
  const int keep = cpu::compute_threads();
  cpu::set_compute_threads(3);
  every_layer_type();
  cpu::set_compute_threads(keep);
}

}  // namespace
}  // namespace pd
