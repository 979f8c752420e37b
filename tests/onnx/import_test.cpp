// What the importer makes of a graph: initializers as the initial weights
// under their ONNX names, shape arithmetic folded at import yet the model
// running at any batch size, and cuts only where one activation is live.
#include <gtest/gtest.h>

#include "core/bf16_rounding.h"
#include "core/device_ops.h"
#include "core/error.h"
#include "core/loss.h"
#include "models/layer_range.h"
#include "models/parameters.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::onnx {
namespace {

using testing::encode;
using testing::int_attribute;
using testing::make_node;
using testing::small_model;

// small_model with its Flatten replaced by what torch.flatten traces to
// with x.shape[0]: Shape -> Gather(0) -> Unsqueeze -> Concat([N, -1]) -> Reshape.
ModelProto traced_reshape_model() {
  ModelProto m = small_model();
  Graph& g = m.graph;
  TensorValue zero, axes, minus_one;
  zero.name = "zero";
  zero.data_type = kInt64;
  zero.ints = {0};
  axes = zero;
  axes.name = "axes";
  axes.dims = {1};
  minus_one.name = "minus_one";
  minus_one.data_type = kInt64;
  minus_one.dims = {1};
  minus_one.ints = {-1};
  g.initializers.insert(g.initializers.end(), {zero, axes, minus_one});
  Node gather = make_node("gather", "Gather", {"shape", "zero"}, {"n"});
  gather.attributes = {int_attribute("axis", 0)};
  Node concat = make_node("concat", "Concat", {"n1", "minus_one"}, {"target"});
  concat.attributes = {int_attribute("axis", 0)};
  std::vector<Node> nodes = {g.nodes[0], g.nodes[1], g.nodes[2],
                             make_node("shape", "Shape", {"s"}, {"shape"}), gather,
                             make_node("unsqueeze", "Unsqueeze", {"n", "axes"}, {"n1"}), concat,
                             make_node("reshape", "Reshape", {"s", "target"}, {"f"}), g.nodes[4]};
  g.nodes = nodes;
  return m;
}

Tensor run_forward(const Model& m, const ParameterStore& w, const Tensor& x) {
  RangeContext ctx;
  StepInfo s;
  s.training = true;
  return forward_layers(m, w, 0, m.size() - 1, x, s, ctx);
}

TEST(OnnxImport, InitializersAreTheInitialWeightsUnderTheirOnnxNames) {
  const ModelProto proto = small_model();
  const Model m = import_model(parse_model(encode(proto), "small.onnx"), "small");
  const ParameterStore w = ParameterStore::create(m, 123);  // the seed does not matter
  ASSERT_EQ(w.param_names().size(), 4u);
  EXPECT_EQ(w.param_names()[0], "0.conv.weight");
  EXPECT_EQ(w.param_names()[3], "2.fc.bias");
  const TensorValue& fc = proto.graph.initializers[2];
  for (size_t i = 0; i < fc.floats.size(); ++i) ASSERT_EQ(w.all_params()[2].f32()[i], fc.floats[i]);
}

TEST(OnnxImport, TracedShapeArithmeticIsFoldedAndTheModelRunsAtAnyBatch) {
  const Model folded = import_model(parse_model(encode(traced_reshape_model()), "traced.onnx"), "traced");
  const Model plain = import_model(parse_model(encode(small_model()), "small.onnx"), "small");
  // Shape/Gather/Unsqueeze/Concat vanish at import; the Reshape remains.
  EXPECT_EQ(folded.size(), plain.size());
  EXPECT_EQ(folded.layer(1).describe(), "onnx(Reshape)");
  const ParameterStore wf = ParameterStore::create(folded, 0), wp = ParameterStore::create(plain, 0);
  for (int64_t batch : {4, 7, 1}) {  // exported at 4
    Tensor x = Tensor::empty({batch, 2, 6, 6});
    for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>((i * 31) % 17) / 17.0f - 0.5f;
    const Tensor a = run_forward(folded, wf, x), b = run_forward(plain, wp, x);
    ASSERT_EQ(a.shape(), (Shape{batch, 5}));
    for (int64_t i = 0; i < a.numel(); ++i) ASSERT_EQ(a.f32()[i], b.f32()[i]) << "batch " << batch;
  }
}

TEST(OnnxImport, CutsOnlyWhereOneActivationIsLive) {
  // x feeds both the conv and the residual Add: no cut before the Add.
  const Model m = import_model(parse_model(encode(small_model()), "small.onnx"), "small");
  ASSERT_EQ(m.size(), 3);
  EXPECT_EQ(m.layer(0).describe(), "onnx(Conv,Relu,Add)");
  EXPECT_EQ(m.layers[0].output_shape, (Shape{2, 6, 6}));
  EXPECT_EQ(m.layer(2).describe(), "onnx(Gemm)");
  // A model exported for 6x6 images refuses other sizes with a message.
  EXPECT_THROW(m.layer(0).output_shape({2, 8, 8}), UserError);
}

// Under --precision bf16 an imported graph is rounded at its boundary
// (its input, weights and output), not between its own nodes: its Relu
// does not round as the core ReLU layer does in a chain of layers.
TEST(OnnxImport, UnderBf16AGraphIsRoundedAtItsBoundaryOnly) {
  const Model m = import_model(parse_model(encode(small_model()), "small.onnx"), "small");
  ASSERT_EQ(m.layer(0).describe(), "onnx(Conv,Relu,Add)");
  const ParameterStore w = ParameterStore::create(m, 0);
  Tensor x = Tensor::empty({4, 2, 6, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>((i * 37) % 23) / 7.0f - 1.6f;
  RangeContext ctx;
  const Tensor got = forward_layers(m, w, 0, 0, x, {.training = true, .precision = Precision::BF16}, ctx);
  std::vector<Tensor> params;
  for (const Tensor& p : w.params(0)) params.push_back(rounded_copy_if_bf16(Precision::BF16, p));
  LayerContext c;
  Tensor want = m.layer(0).forward({params, w.buffers(0), {.training = true}},
                                   rounded_copy_if_bf16(Precision::BF16, x), c);
  round_in_place_if_bf16(Precision::BF16, want);
  ASSERT_EQ(got.shape(), want.shape());
  for (int64_t i = 0; i < got.numel(); ++i) ASSERT_EQ(got.f32()[i], want.f32()[i]) << i;
}

// Under bf16 storage the node that writes an imported model's logits (a
// Gemm) hands the loss bf16 logits, as the zoo's heads do, with the bits of
// FP32 storage: the same loss and gradients.
TEST(OnnxImport, UnderBf16StorageAnImportedHeadHandsTheLossBf16Logits) {
  const Model m = import_model(parse_model(encode(small_model()), "small.onnx"), "small");
  const int last = m.size() - 1;
  ASSERT_EQ(m.layer(last).describe(), "onnx(Gemm)");
  Tensor x = Tensor::empty({4, 2, 6, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = static_cast<float>((i * 29) % 19) / 6.0f - 1.5f;
  const Tensor labels = Tensor::from_ints({0, 3, 1, 4}, {4});
  const StepInfo step{.training = true, .precision = Precision::BF16, .output_to_loss = true};
  struct Result {
    DType logits;
    float loss;
    ParameterStore grads;
  };
  auto run = [&](Bf16Storage storage) {
    set_bf16_storage(storage);
    const ParameterStore w = ParameterStore::create(m, 0);
    Result r{DType::F32, 0, w.zeros_like_params()};
    RangeContext ctx;
    Tensor logits = forward_layers(m, w, 0, last, x, step, ctx);
    r.logits = logits.dtype();
    LossResult loss = softmax_cross_entropy(std::move(logits), labels);
    r.loss = loss.loss;
    backward_layers(m, w, r.grads, 0, last, loss.grad, step, ctx, false);
    return r;
  };
  const Result bf16 = run(Bf16Storage::Always), fp32 = run(Bf16Storage::Never);
  set_bf16_storage(Bf16Storage::WhereItPays);
  EXPECT_EQ(bf16.logits, DType::BF16);
  EXPECT_EQ(fp32.logits, DType::F32);
  EXPECT_EQ(bf16.loss, fp32.loss);
  for (size_t k = 0; k < bf16.grads.all_params().size(); ++k)
    EXPECT_EQ(bf16.grads.all_params()[k].to_floats(), fp32.grads.all_params()[k].to_floats())
        << bf16.grads.param_names()[k];
}

}  // namespace
}  // namespace pd::onnx
