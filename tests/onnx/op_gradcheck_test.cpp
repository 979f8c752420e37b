// Every ONNX op's backward against finite differences, through the core
// layers' gradient checker (tests/core/gradcheck.h): an OpAsLayer adapter
// makes one input the layer's input and the other float inputs its
// parameters, so every input gradient is checked.
#include <gtest/gtest.h>

#include <climits>

#include "core/error.h"
#include "onnx/op.h"
#include "tests/core/gradcheck.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::onnx {
namespace {

using pd::testing::gradcheck;
using pd::testing::GradCheckOptions;
using pd::testing::random_tensor;
using testing::float_attribute;
using testing::int_attribute;
using testing::ints_attribute;

Tensor ints(std::vector<int64_t> v) {
  Tensor t = Tensor::empty({static_cast<int64_t>(v.size())}, DType::I64);
  std::copy(v.begin(), v.end(), t.data<int64_t>());
  return t;
}

// One input of the op under test: a run-time tensor (the layer input or a
// parameter) or a constant.
struct In {
  Tensor value;
  bool constant = false;
  bool buffer = false;   // BatchNormalization's running statistics: passed as they are, no gradient
  bool batched = false;  // a parameter that carries the batch dimension too (Concat's second input)
  int axis = 0;          // the dimension holding the batch, where batched (Gemm's transA: 1)
};

class OpAsLayer : public Layer {
 public:
  OpAsLayer(const Node& node, std::vector<In> in, size_t x_index, size_t output = 0, size_t outputs = 1)
      : in_(std::move(in)), x_(x_index), output_(output), outputs_(outputs) {
    OpInputs info;
    info.batch = in_[x_].value.dim(0);
    for (size_t k = 0; k < in_.size(); ++k) {
      info.example.push_back(in_[k].value);
      info.constant.push_back(in_[k].constant);
      info.batched.push_back(k == x_ || in_[k].batched);
      info.layout.push_back(BatchLayout{in_[k].axis, 1, 1});
      if (k != x_ && !in_[k].constant && !in_[k].buffer && in_[k].value.defined()) params_.push_back(k);
    }
    op_ = make_op(node, info);
  }
  std::string type() const override { return op_->type(); }
  std::vector<ParamSpec> param_specs() const override {
    std::vector<ParamSpec> s;
    for (size_t k : params_) s.push_back({cat("input", k), in_[k].value.shape()});
    return s;
  }
  void init(std::span<Tensor> params, std::span<Tensor>, const CounterRng&) const override {
    for (size_t k = 0; k < params_.size(); ++k) params[k].copy_from(in_[params_[k]].value);
  }
  Shape output_shape(const Shape& s) const override { return s; }
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    std::vector<Tensor> in = inputs(a.params);
    in[x_] = x;
    ctx.children.resize(1);
    return op_->forward(in, a.step, ctx.children[0])[output_];
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    std::vector<Tensor> dys(outputs_);
    dys[output_] = dy;
    std::vector<bool> need(in_.size(), false);
    need[x_] = a.need_input_grad;
    for (size_t k : params_) need[k] = true;
    std::vector<Tensor> g = op_->backward(dys, need, a.step, ctx.children[0]);
    for (size_t k = 0; k < params_.size(); ++k) {
      const Tensor& gk = g[params_[k]];
      for (int64_t i = 0; i < gk.numel(); ++i) a.grads[k].f32()[i] += gk.f32()[i];
    }
    return a.need_input_grad ? g[x_] : Tensor();
  }

 private:
  std::vector<Tensor> inputs(std::span<const Tensor> params) const {
    std::vector<Tensor> in;
    for (const In& i : in_) in.push_back(i.value);
    for (size_t k = 0; k < params_.size(); ++k) in[params_[k]] = params[k];
    return in;
  }
  std::vector<In> in_;
  size_t x_, output_, outputs_;
  std::vector<size_t> params_;
  OpPtr op_;
};

Node node(const std::string& op, size_t inputs, std::vector<Attribute> attrs = {}, size_t outputs = 1) {
  Node n;
  n.op_type = op;
  n.name = "test_" + op;
  for (size_t k = 0; k < inputs; ++k) n.inputs.push_back(cat("in", k));
  for (size_t k = 0; k < outputs; ++k) n.outputs.push_back(cat("out", k));
  n.attributes = std::move(attrs);
  return n;
}

void check(const Node& n, std::vector<In> in, size_t x = 0, GradCheckOptions o = {}, size_t output = 0) {
  const Tensor xv = in[x].value;
  OpAsLayer layer(n, std::move(in), x, output, n.outputs.size());
  gradcheck(layer, xv, o);
}

Tensor rnd(const Shape& s, uint32_t key, float scale = 1.0f) { return random_tensor(s, key, scale); }
Tensor positive(const Shape& s, uint32_t key) {
  Tensor t = rnd(s, key, 0.5f);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] += 1.5f;
  return t;
}

TEST(OnnxOpGradcheck, AddSubMulDivWithBroadcasting) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    SCOPED_TRACE(op);
    const bool div = std::string(op) == "Div";
    check(node(op, 2), {{rnd({2, 3, 4}, 1)}, {div ? positive({4}, 2) : rnd({4}, 2)}});
    check(node(op, 2), {{rnd({2, 1, 4}, 3)}, {div ? positive({3, 1}, 4) : rnd({3, 1}, 4)}});
    check(node(op, 2), {{rnd({2, 3}, 5)}, {div ? positive({2, 3}, 6) : rnd({2, 3}, 6)}});
  }
}

TEST(OnnxOpGradcheck, UnaryFunctions) {
  for (const char* op : {"Erf", "Tanh", "Sigmoid", "Neg", "Identity", "Sin", "Cos", "Exp"}) {
    SCOPED_TRACE(op);
    check(node(op, 1), {{rnd({3, 5}, 7)}});
  }
  check(node("Sqrt", 1), {{positive({3, 5}, 8)}});
  check(node("Reciprocal", 1), {{positive({3, 5}, 11)}});
  // Inside the kinks at -3 and 3 (where the slopes jump).
  check(node("HardSwish", 1), {{rnd({3, 5}, 12, 2.5f)}});
  check(node("HardSigmoid", 1, {float_attribute("alpha", 1.0f / 6), float_attribute("beta", 0.5f)}), {{rnd({3, 5}, 13, 2.5f)}});
  check(node("Pow", 2), {{rnd({3, 5}, 9)}, {Tensor::from_floats({2.0f}, {}), true}});
  check(node("Pow", 2), {{positive({3, 5}, 9)}, {Tensor::from_floats({3.0f}, {}), true}});
  check(node("Clip", 3), {{rnd({4, 6}, 10, 3.0f)}, {Tensor::from_floats({-1.0f}, {}), true}, {Tensor::from_floats({1.0f}, {}), true}});
}

TEST(OnnxOpGradcheck, ExpandOfARunTimeTensor) {
  check(node("Expand", 2), {{rnd({2, 1, 3}, 14)}, {ints({2, 4, 3}), true}});
  check(node("Expand", 2), {{rnd({2, 3}, 15)}, {ints({4, 1, 1}), true}});
}

TEST(OnnxOpGradcheck, MatMulBatchedBroadcastAndWeight) {
  check(node("MatMul", 2), {{rnd({2, 3, 4, 5}, 11)}, {rnd({2, 3, 5, 2}, 12)}});
  check(node("MatMul", 2), {{rnd({2, 3, 4, 5}, 13)}, {rnd({1, 3, 5, 2}, 14)}});
  check(node("MatMul", 2), {{rnd({2, 3, 4}, 15)}, {rnd({4, 6}, 16)}});
}

TEST(OnnxOpGradcheck, TransposeReshapeFlattenSqueezeUnsqueeze) {
  check(node("Transpose", 1, {ints_attribute("perm", {0, 2, 1, 3})}), {{rnd({2, 3, 4, 5}, 17)}});
  check(node("Reshape", 2), {{rnd({2, 3, 4}, 18)}, {ints({2, -1, 2}), true}});
  check(node("Flatten", 1, {int_attribute("axis", 1)}), {{rnd({2, 3, 4}, 19)}});
  check(node("Unsqueeze", 2), {{rnd({2, 3}, 20)}, {ints({1}), true}});
  check(node("Squeeze", 2), {{rnd({2, 1, 3}, 21)}, {ints({1}), true}});
}

TEST(OnnxOpGradcheck, SoftmaxOverAnyAxis) {
  check(node("Softmax", 1, {int_attribute("axis", -1)}), {{rnd({2, 3, 5}, 22, 2.0f)}});
  check(node("Softmax", 1, {int_attribute("axis", 1)}), {{rnd({2, 3, 5}, 23, 2.0f)}});
}

TEST(OnnxOpGradcheck, GatherEmbeddingAndConstantIndices) {
  Tensor tokens = Tensor::from_ints({0, 3, 3, 1, 4, 2}, {2, 3});  // run-time token ids (I32)
  GradCheckOptions no_input;
  no_input.check_input = false;
  check(node("Gather", 2), {{rnd({5, 4}, 24)}, {tokens}}, 1, no_input);
  check(node("Gather", 2, {int_attribute("axis", 1)}), {{rnd({2, 4, 3}, 25)}, {ints({3, 0, 3}), true}});
}

TEST(OnnxOpGradcheck, WhereWithConstantCondition) {
  Tensor cond = ints({1, 0, 1, 1, 0, 0});
  cond = cond.reshape({2, 3});
  check(node("Where", 3), {{cond, true}, {rnd({2, 2, 3}, 26)}, {rnd({3}, 27)}}, 1);
  check(node("Where", 3), {{cond, true}, {Tensor::from_floats({-1e4f}, {}), true}, {rnd({2, 2, 3}, 28)}}, 2);
}

TEST(OnnxOpGradcheck, ReduceMeanAndSum) {
  check(node("ReduceMean", 1, {ints_attribute("axes", {-1})}), {{rnd({2, 3, 5}, 59)}});
  check(node("ReduceMean", 1, {ints_attribute("axes", {1, 2}), int_attribute("keepdims", 0)}), {{rnd({2, 3, 4}, 60)}});
  check(node("ReduceSum", 2), {{rnd({2, 3, 4}, 61)}, {ints({1}), true}});
}

TEST(OnnxOpGradcheck, SliceSplitConcat) {
  check(node("Slice", 5), {{rnd({2, 6, 5}, 29)}, {ints({1, -4}), true}, {ints({5, 100}), true}, {ints({1, 2}), true}, {ints({2, 1}), true}});
  // Negative steps: axis 1 from 4 down past 0 by 2, axis 2 reversed whole (torch.flip's INT64_MIN end).
  check(node("Slice", 5), {{rnd({2, 6, 5}, 33)}, {ints({4, -1}), true}, {ints({-100, INT64_MIN}), true}, {ints({1, 2}), true}, {ints({-2, -1}), true}});
  for (size_t out = 0; out < 3; ++out)
    check(node("Split", 2, {int_attribute("axis", 2)}, 3), {{rnd({2, 3, 7}, 30)}, {ints({2, 4, 1}), true}}, 0, {}, out);
  check(node("Concat", 2, {int_attribute("axis", 1)}), {{rnd({2, 3, 4}, 31)}, {rnd({2, 2, 4}, 32), false, false, true}});
}

TEST(OnnxOpGradcheck, SliceWithNegativeStepsReadsBackwards) {
  Tensor x = Tensor::empty({2, 6});
  for (int64_t i = 0; i < 12; ++i) x.f32()[i] = static_cast<float>(i);
  OpInputs info;
  info.batch = 2;
  info.example = {x, ints({5}), ints({0}), ints({1}), ints({-2})};
  info.constant = {false, true, true, true, true};
  info.batched = {true, false, false, false, false};
  const OpPtr op = make_op(node("Slice", 5), info);
  LayerContext ctx;
  const Tensor y = op->forward(info.example, StepInfo{}, ctx)[0];  // columns 5, 3, 1
  EXPECT_EQ(y.shape(), (Shape{2, 3}));
  EXPECT_EQ(y.to_floats(), (std::vector<float>{5, 3, 1, 11, 9, 7}));
  const std::vector<Tensor> dy{Tensor::full({2, 3}, 1.0f)};
  const Tensor dx = op->backward(dy, {true, false, false, false, false}, StepInfo{}, ctx)[0];
  EXPECT_EQ(dx.to_floats(), (std::vector<float>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}));
}

TEST(OnnxOpGradcheck, PoolsBeyondTheCoreAndPad) {
  // Max pooling on well-separated values: a finite-difference step must not change the maximum.
  Tensor distinct = Tensor::empty({2, 2, 6, 6});
  for (int64_t i = 0; i < distinct.numel(); ++i) distinct.f32()[i] = 0.1f * static_cast<float>((i * 37) % 144) - 7.0f;
  check(node("MaxPool", 1, {ints_attribute("kernel_shape", {3, 3}), ints_attribute("strides", {2, 2}), int_attribute("ceil_mode", 1)}),
        {{distinct}});
  check(node("AveragePool", 1, {ints_attribute("kernel_shape", {3, 2}), ints_attribute("strides", {2, 1}), ints_attribute("pads", {1, 0, 1, 1}),
                                int_attribute("ceil_mode", 1), int_attribute("count_include_pad", 0)}),
        {{rnd({2, 2, 5, 6}, 51)}});
  check(node("AveragePool", 1, {ints_attribute("kernel_shape", {3, 3}), ints_attribute("pads", {1, 1, 1, 1}), int_attribute("count_include_pad", 1),
                                int_attribute("ceil_mode", 1), ints_attribute("strides", {2, 2})}),
        {{rnd({2, 2, 6, 6}, 52)}});
  check(node("Pad", 2), {{rnd({2, 2, 3, 3}, 53)}, {ints({0, 0, 1, 2, 0, 0, 2, 1}), true}});
}

// Gemm beyond a linear layer: Y = alpha op(A) op(B) + beta C, C broadcast.
TEST(OnnxOpGradcheck, GemmEveryForm) {
  // Hugging Face's Conv1D: transB=0, a bias [N].
  check(node("Gemm", 3), {{rnd({3, 5}, 70)}, {rnd({5, 4}, 71)}, {rnd({4}, 72)}});
  // transA and transB, alpha and beta, a bias row [1, N]; A [K, M] holds the batch in dimension 1.
  check(node("Gemm", 3, {int_attribute("transA", 1), int_attribute("transB", 1), float_attribute("alpha", 0.7f),
                         float_attribute("beta", 1.3f)}),
        {{.value = rnd({5, 3}, 73), .axis = 1}, {rnd({4, 5}, 74)}, {rnd({1, 4}, 75)}});
  // A scalar C ([1]) scaled by beta, alpha on the product.
  check(node("Gemm", 3, {float_attribute("alpha", 2.0f), float_attribute("beta", 0.5f)}),
        {{rnd({3, 5}, 76)}, {rnd({5, 4}, 77)}, {rnd({1}, 78)}});
  // No C; and a C of the whole [M, N] that holds the batch beside A.
  check(node("Gemm", 2, {int_attribute("transB", 1)}), {{rnd({3, 5}, 79)}, {rnd({4, 5}, 80)}});
  check(node("Gemm", 3, {float_attribute("beta", -1.5f)}),
        {{rnd({3, 5}, 81)}, {rnd({5, 4}, 82)}, {.value = rnd({3, 4}, 83), .batched = true}});
  // beta = 0: C does not reach Y (its gradient is zero).
  check(node("Gemm", 3, {float_attribute("beta", 0.0f)}), {{rnd({3, 5}, 84)}, {rnd({5, 4}, 85)}, {rnd({4}, 86)}});
}

TEST(OnnxOpGradcheck, CoreLayerAdapters) {
  check(node("Conv", 3, {ints_attribute("kernel_shape", {3, 3}), ints_attribute("pads", {1, 1, 1, 1}), ints_attribute("strides", {2, 2})}),
        {{rnd({2, 3, 6, 6}, 33)}, {rnd({4, 3, 3, 3}, 34, 0.3f)}, {rnd({4}, 35)}});
  check(node("Conv", 3, {ints_attribute("kernel_shape", {3, 3}), ints_attribute("pads", {1, 1, 1, 1}), int_attribute("group", 2)}),
        {{rnd({2, 4, 5, 5}, 45)}, {rnd({6, 2, 3, 3}, 46, 0.3f)}, {rnd({6}, 47)}});
  check(node("Conv", 2, {ints_attribute("kernel_shape", {3, 3}), ints_attribute("strides", {2, 2}), int_attribute("group", 4)}),
        {{rnd({2, 4, 7, 7}, 48)}, {rnd({4, 1, 3, 3}, 49, 0.3f)}});
  check(node("Conv", 3, {ints_attribute("kernel_shape", {1, 3}), ints_attribute("pads", {0, 1, 0, 1})}),
        {{rnd({2, 3, 4, 5}, 54)}, {rnd({2, 3, 1, 3}, 55, 0.3f)}, {rnd({2}, 56)}});
  check(node("Conv", 2, {ints_attribute("kernel_shape", {3, 2}), ints_attribute("strides", {2, 1}), ints_attribute("pads", {1, 0, 0, 1})}),
        {{rnd({2, 2, 5, 4}, 57)}, {rnd({3, 2, 3, 2}, 58, 0.3f)}});
  // Groups with a rectangular kernel, per-axis strides and uneven pads (TensorFlow-style "same" depthwise).
  check(node("Conv", 3, {ints_attribute("kernel_shape", {3, 2}), ints_attribute("strides", {2, 1}), ints_attribute("pads", {0, 0, 1, 1}),
                         int_attribute("group", 2)}),
        {{rnd({2, 4, 5, 4}, 62)}, {rnd({6, 2, 3, 2}, 63, 0.3f)}, {rnd({6}, 64)}});
  check(node("Gemm", 3, {int_attribute("transB", 1)}), {{rnd({3, 5}, 36)}, {rnd({4, 5}, 37)}, {rnd({4}, 38)}});
  check(node("LayerNormalization", 3, {int_attribute("axis", -1), float_attribute("epsilon", 1e-5f)}),
        {{rnd({2, 3, 6}, 39)}, {positive({6}, 40)}, {rnd({6}, 41)}});
  check(node("BatchNormalization", 5, {float_attribute("epsilon", 1e-5f), float_attribute("momentum", 0.9f), int_attribute("training_mode", 1)}, 3),
        {{rnd({3, 2, 3, 3}, 42)}, {positive({2}, 43)}, {rnd({2}, 44)}, {Tensor::zeros({2}), false, true}, {Tensor::full({2}, 1.0f), false, true}});
  // BatchNorm1d: [N, C] and [N, C, L].
  for (const Shape& s : {Shape{5, 2}, Shape{3, 2, 4}})
    check(node("BatchNormalization", 5, {float_attribute("epsilon", 1e-5f), float_attribute("momentum", 0.9f), int_attribute("training_mode", 1)}, 3),
          {{rnd(s, 59)}, {positive({2}, 60)}, {rnd({2}, 61)}, {Tensor::zeros({2}), false, true}, {Tensor::full({2}, 1.0f), false, true}});
}

}  // namespace
}  // namespace pd::onnx
