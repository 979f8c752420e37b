#include <map>

#include "core/error.h"

#include "onnx/op.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

using Factory = OpPtr (*)(const Node&, const OpInputs&);

const std::map<std::string, Factory>& factories() {
  static const std::map<std::string, Factory> f = {
      {"Conv", make_core_layer_op}, {"BatchNormalization", make_core_layer_op}, {"Relu", make_core_layer_op},
      {"MaxPool", make_core_layer_op}, {"AveragePool", make_core_layer_op},
      {"GlobalAveragePool", make_core_layer_op}, {"Gemm", make_core_layer_op},
      {"LayerNormalization", make_core_layer_op}, {"Dropout", make_core_layer_op},
      {"Add", make_binary_op}, {"Sub", make_binary_op}, {"Mul", make_binary_op}, {"Div", make_binary_op},
      {"Erf", make_unary_op}, {"Tanh", make_unary_op}, {"Sqrt", make_unary_op}, {"Sigmoid", make_unary_op},
      {"Neg", make_unary_op}, {"Pow", make_unary_op}, {"Clip", make_unary_op}, {"Identity", make_unary_op},
      {"Cast", make_unary_op}, {"Sin", make_unary_op}, {"Cos", make_unary_op}, {"Exp", make_unary_op},
      {"Reciprocal", make_unary_op},
      {"MatMul", make_matmul_op}, {"Transpose", make_transpose_op},
      {"Reshape", make_view_op}, {"Flatten", make_view_op}, {"Squeeze", make_view_op}, {"Unsqueeze", make_view_op},
      {"Softmax", make_softmax_op}, {"Gather", make_gather_op}, {"Where", make_where_op},
      {"Slice", make_slice_op}, {"Pad", make_pad_op}, {"ReduceMean", make_reduce_op}, {"ReduceSum", make_reduce_op}, {"Split", make_split_op}, {"Concat", make_concat_op},
      {"Expand", make_expand_op}, {"HardSwish", make_unary_op}, {"HardSigmoid", make_unary_op},
  };
  return f;
}

}  // namespace

OpPtr make_op(const Node& node, const OpInputs& in) {
  auto it = factories().find(node.op_type);
  PD_CHECK(it != factories().end(), "no op for ", node.op_type);
  return it->second(node, in);
}

bool is_supported_op(const std::string& op_type) { return factories().count(op_type) > 0; }

std::vector<std::string> supported_ops() {
  std::vector<std::string> v;
  for (const auto& [name, f] : factories()) v.push_back(name);
  return v;
}

}  // namespace pd::onnx
