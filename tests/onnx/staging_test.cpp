// An imported graph rebuilt with one layer per stage (ModelGraph::restage):
// boundaries that carry several tensors, packed per sample, compute exactly
// what the default layers compute, their gradients pass the checker, and
// plans the graph cannot run are refused naming what is wrong.
#include <gtest/gtest.h>

#include "core/error.h"
#include "core/loss.h"
#include "models/layer_range.h"
#include "models/parameters.h"
#include "onnx/import.h"
#include "tests/core/gradcheck.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::onnx {
namespace {

using testing::encode;
using testing::small_model;

Model small() { return import_model(parse_model(encode(small_model()), "small.onnx"), "small"); }

// Loss and every gradient of one training step, by initializer name.
struct StepResult {
  float loss = 0;
  std::map<std::string, std::vector<float>> grads;
};

StepResult one_step(const Model& m, const Tensor& x, const Tensor& labels) {
  ParameterStore w = ParameterStore::create(m, 1);
  ParameterStore g = w.zeros_like_params();
  StepInfo step{.training = true, .seed = 2, .minibatch_id = 7};
  RangeContext ctx;
  Tensor logits = forward_layers(m, w, 0, m.size() - 1, x, step, ctx);
  LossResult r = softmax_cross_entropy(logits, labels, true);
  backward_layers(m, w, g, 0, m.size() - 1, r.grad, step, ctx, false);
  StepResult out;
  out.loss = r.loss;
  for (const auto& [name, t] : g.named_tensors()) {
    const std::string init = name.substr(name.find('.') + 1);
    out.grads[init] = std::vector<float>(t.f32(), t.f32() + t.numel());
  }
  return out;
}

TEST(OnnxStaging, UnitsOfTheSmallGraphAreItsNodes) {
  const Model m = small();
  ASSERT_TRUE(m.graph);
  ASSERT_EQ(m.graph->units.size(), 5u);  // conv, relu, residual add, flatten, gemm
  EXPECT_EQ(m.graph->units[0].name, "conv");
  // conv -> relu -> add, flatten -> gemm; the input's skip into the add is no unit edge.
  const std::vector<std::pair<int, int>> edges = {{0, 1}, {1, 2}, {2, 3}, {3, 4}};
  EXPECT_EQ(m.graph->edges, edges);
  EXPECT_EQ(m.graph->units[0].output_bytes_per_sample, 2u * 6 * 6 * 4);
  EXPECT_EQ(m.graph->units[0].parameter_bytes, (2u * 2 * 3 * 3 + 2) * 4);
}

TEST(OnnxStaging, CutThroughTheResidualComputesWhatTheDefaultLayersCompute) {
  const Model plain = small();
  // Stage 0: the conv; stage 1: relu, add, flatten, gemm. The cut carries
  // the conv output and the input the residual adds back.
  const Model staged = plain.graph->restage({0, 1, 1, 1, 1});
  ASSERT_EQ(staged.size(), 2);
  EXPECT_EQ(staged.layers[0].output_shape, Shape({2 * 6 * 6 + 2 * 6 * 6}));  // two tensors, packed
  EXPECT_EQ(staged.spec["layers"][0]["boundary_tensors"], 2);
  const Tensor x = pd::testing::random_tensor({4, 2, 6, 6}, 3);
  const Tensor labels = Tensor::from_ints({0, 1, 2, 3}, {4});
  const StepResult a = one_step(plain, x, labels), b = one_step(staged, x, labels);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grads, b.grads);  // bit for bit: the same ops in the same order
}

TEST(OnnxStaging, SkipsAreForwardedThroughStagesThatDoNotReadThem) {
  const Model plain = small();
  // The input crosses two cuts: stage 1 (relu) passes it on to stage 2 (add).
  const Model staged = plain.graph->restage({0, 1, 2, 2, 2});
  ASSERT_EQ(staged.size(), 3);
  EXPECT_EQ(staged.spec["layers"][1]["boundary_tensors"], 2);
  const Tensor x = pd::testing::random_tensor({4, 2, 6, 6}, 4);
  const Tensor labels = Tensor::from_ints({4, 3, 2, 1}, {4});
  const StepResult a = one_step(plain, x, labels), b = one_step(staged, x, labels);
  EXPECT_EQ(a.loss, b.loss);
  EXPECT_EQ(a.grads, b.grads);
}

TEST(OnnxStaging, PackedBoundariesPassTheGradientChecker) {
  const Model staged = small().graph->restage({0, 1, 2, 2, 2});
  const Tensor x = pd::testing::random_tensor({4, 2, 6, 6}, 5);
  // Layer 0 packs two outputs; layer 1 unpacks two and passes one through;
  // layer 2 unpacks two.
  pd::testing::gradcheck(staged.layer(0), x);
  const Tensor packed = pd::testing::random_tensor({4, 144}, 6);
  pd::testing::gradcheck(staged.layer(1), packed);
  pd::testing::gradcheck(staged.layer(2), packed);
}

TEST(OnnxStaging, PlansTheGraphCannotRunAreRefused) {
  const Model m = small();
  auto message = [&](const std::vector<int>& stages) {
    try {
      m.graph->restage(stages);
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(message({0, 0, 0}).find("places 3 units, the model has 5"), std::string::npos);
  EXPECT_NE(message({1, 0, 1, 1, 1}).find("after its reader"), std::string::npos) << message({1, 0, 1, 1, 1});
  EXPECT_NE(message({0, 0, 2, 2, 2}).find("stage 1 has no units"), std::string::npos) << message({0, 0, 2, 2, 2});
}

}  // namespace
}  // namespace pd::onnx
