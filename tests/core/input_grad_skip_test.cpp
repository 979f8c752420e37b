// A pipeline's first stage runs its lowest layer's backward without the
// input gradient (need_input_grad = false: nothing below consumes it). That
// must not change the weights it trains: every layer with parameters gives
// bitwise the same parameter gradients either way - through the fused
// backward and through the split one (backward_input, backward_weights)
// that zero-bubble schedules run.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/layers.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

std::vector<Tensor> param_grads(const Layer& layer, const std::vector<Tensor>& params, const Tensor& x,
                                const Tensor& dy, bool need_input_grad, Tensor* dx, bool split = false) {
  std::vector<Tensor> buffers = allocate_buffers(layer);
  std::vector<Tensor> unused = allocate_params(layer);
  layer.init(unused, buffers, CounterRng(7, 0, 0));
  StepInfo step;
  step.training = true;
  step.seed = 5;
  step.minibatch_id = 3;
  LayerContext ctx;
  layer.forward({params, buffers, step}, x, ctx);
  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(Tensor::zeros(p.shape()));
  if (split) {
    *dx = layer.backward_input({params, grads, step, need_input_grad}, dy, ctx);
    layer.backward_weights({params, grads, step, false}, ctx);
  } else {
    *dx = layer.backward({params, grads, step, need_input_grad}, dy, ctx);
  }
  return grads;
}

void expect_same_param_grads_without_input_grad(const Layer& layer, const Tensor& x) {
  std::vector<Tensor> params = allocate_params(layer);
  std::vector<Tensor> buffers = allocate_buffers(layer);
  layer.init(params, buffers, CounterRng(7, 0, 0));
  ASSERT_FALSE(params.empty()) << layer.type() << " has no parameters";
  Shape out = layer.output_shape({x.shape().begin() + 1, x.shape().end()});
  out.insert(out.begin(), x.shape()[0]);
  const Tensor dy = testing::random_tensor(out, 77);

  Tensor dx_with, dx_without;
  const std::vector<Tensor> with = param_grads(layer, params, x, dy, true, &dx_with);
  const std::vector<Tensor> without = param_grads(layer, params, x, dy, false, &dx_without);
  EXPECT_TRUE(dx_with.defined()) << layer.type();
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i)
    EXPECT_EQ(0, std::memcmp(with[i].raw(), without[i].raw(), with[i].nbytes()))
        << layer.type() << ": gradient of parameter " << i << " depends on need_input_grad";
  for (bool need_input_grad : {true, false}) {
    Tensor dx_split;
    const std::vector<Tensor> split = param_grads(layer, params, x, dy, need_input_grad, &dx_split, true);
    EXPECT_EQ(dx_split.defined(), need_input_grad) << layer.type();
    ASSERT_EQ(split.size(), with.size());
    for (size_t i = 0; i < with.size(); ++i)
      EXPECT_EQ(0, std::memcmp(with[i].raw(), split[i].raw(), with[i].nbytes()))
          << layer.type() << ": gradient of parameter " << i << " differs in the split backward"
          << (need_input_grad ? "" : " without the input gradient");
  }
}

using testing::random_tensor;

TEST(InputGradSkip, ConvolutionsAndLinearTrainTheSameWeights) {
  expect_same_param_grads_without_input_grad(*make_conv2d(3, 4, 3, 1, 1), random_tensor({2, 3, 6, 6}, 1));
  expect_same_param_grads_without_input_grad(*make_conv2d(1, 8, 5, 1, 2), random_tensor({4, 1, 12, 12}, 2));
  expect_same_param_grads_without_input_grad(*make_conv2d(3, 4, 3, 2, 1, false), random_tensor({2, 3, 7, 7}, 3));
  // Maps smaller than the kernel take the dense path.
  expect_same_param_grads_without_input_grad(*make_conv2d(4, 4, 3, 1, 1), random_tensor({2, 4, 2, 2}, 4));
  expect_same_param_grads_without_input_grad(*make_linear(12, 5), random_tensor({3, 12}, 5));
  expect_same_param_grads_without_input_grad(*make_linear(8, 6, false), random_tensor({2, 4, 8}, 6));
}

TEST(InputGradSkip, NormalisationAttentionAndBlocksTrainTheSameWeights) {
  expect_same_param_grads_without_input_grad(*make_batchnorm2d(3), random_tensor({4, 3, 5, 5}, 7));
  expect_same_param_grads_without_input_grad(*make_layernorm(8), random_tensor({2, 5, 8}, 8));
  expect_same_param_grads_without_input_grad(*make_causal_self_attention(8, 2), random_tensor({2, 5, 8}, 9));
  expect_same_param_grads_without_input_grad(*make_transformer_block(8, 2), random_tensor({2, 5, 8}, 10));
  expect_same_param_grads_without_input_grad(*make_resnet_basic_block(4, 8, 2), random_tensor({2, 4, 8, 8}, 11));
  expect_same_param_grads_without_input_grad(*make_resnet_bottleneck_block(4, 2, 8, 1),
                                             random_tensor({2, 4, 6, 6}, 12));
}

}  // namespace
}  // namespace pd
