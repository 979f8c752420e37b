// A layer range under --precision bf16 (models/layer_range.cpp) skips the
// rounding passes that change nothing (after ReLU, max pooling, flatten)
// and lets a ReLU round its predecessor's output in its place: the output,
// input gradient and parameter gradients keep the bits of rounding after
// every layer.
#include <gtest/gtest.h>

#include <cstring>

#include "core/bf16_rounding.h"
#include "core/device_ops.h"
#include "models/layer_range.h"
#include "models/parameters.h"
#include "tests/core/gradcheck.h"

namespace pd {
namespace {

using testing::random_tensor;
using testing::same_bits;

Tensor rounded(const Tensor& t) { return rounded_copy_if_bf16(Precision::BF16, t); }

struct ChainResult {
  Tensor y, dx;
  std::vector<Tensor> grads;
};

using Bf16Range = ::testing::Test;

// A layer range gives the bits of rounding after every top-level layer.
ChainResult every_layer_rounded(const Model& m, const ParameterStore& w, const Tensor& x, const Tensor& dy,
                                const StepInfo& step) {
  ChainResult r;
  std::vector<LayerContext> ctx(static_cast<size_t>(m.size()));
  std::vector<std::vector<Tensor>> ops(static_cast<size_t>(m.size()));
  Tensor h = rounded(x);
  for (int i = 0; i < m.size(); ++i) {
    for (const Tensor& p : w.params(i)) ops[static_cast<size_t>(i)].push_back(rounded(p));
    StepInfo s = step;
    s.layer_index = static_cast<uint32_t>(i);
    h = m.layer(i).forward({ops[static_cast<size_t>(i)], w.buffers(i), s}, h, ctx[static_cast<size_t>(i)]);
    round_in_place_if_bf16(Precision::BF16, h);
  }
  r.y = h;
  ParameterStore grads = w.zeros_like_params();
  Tensor g = rounded(dy);
  for (int i = m.size() - 1; i >= 0; --i) {
    StepInfo s = step;
    s.layer_index = static_cast<uint32_t>(i);
    g = m.layer(i).backward({ops[static_cast<size_t>(i)], grads.params(i), s, true}, g, ctx[static_cast<size_t>(i)]);
    round_in_place_if_bf16(Precision::BF16, g);
  }
  r.dx = g;
  for (const Tensor& t : grads.all_params()) r.grads.push_back(t);
  return r;
}

void expect_range_equals_every_layer_rounded(const Model& m, int64_t batch) {
  SCOPED_TRACE(m.name);
  Shape input{batch};
  input.insert(input.end(), m.input_shape.begin(), m.input_shape.end());
  const ParameterStore w = ParameterStore::create(m, 0, m.size() - 1, 4);
  const Tensor x = random_tensor(input, 6);
  const StepInfo step{.training = true, .seed = 9, .minibatch_id = 1, .precision = Precision::BF16};
  // Two stores with the same buffers: batch norms update theirs.
  ParameterStore w_range = ParameterStore::create(m, 0, m.size() - 1, 4);
  RangeContext ctx;
  const Tensor y = forward_layers(m, w_range, 0, m.size() - 1, x, step, ctx);
  const Tensor dy = random_tensor(y.shape(), 8);
  ParameterStore grads = w_range.zeros_like_params();
  const Tensor dx = backward_layers(m, w_range, grads, 0, m.size() - 1, dy, step, ctx, true);
  const ChainResult ref = every_layer_rounded(m, w, x, dy, step);
  EXPECT_TRUE(same_bits(y, ref.y));
  EXPECT_TRUE(same_bits(dx, ref.dx));
  const auto& names = grads.param_names();
  for (size_t k = 0; k < names.size(); ++k)
    EXPECT_TRUE(same_bits(grads.all_params()[k], ref.grads[k])) << names[k];
}

TEST_F(Bf16Range, LayerRangesEqualRoundingAfterEveryLayer) {
  // conv-relu-pool stacks, and a ResNet stem (conv, batch norm, relu, max pool).
  expect_range_equals_every_layer_rounded(build_model(zoo_spec("cnn")), 3);
  expect_range_equals_every_layer_rounded(build_model(zoo_spec("vgg-mini")), 2);
  expect_range_equals_every_layer_rounded(
      build_model(zoo_spec("resnet18", {{"width", 0.125}, {"image_size", 32}, {"classes", 10}})), 2);
}

}  // namespace
}  // namespace pd
