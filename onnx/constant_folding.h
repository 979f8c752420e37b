#pragma once
// Import-time evaluation of nodes whose inputs are all known: the shape
// arithmetic a traced PyTorch model carries (Shape -> Gather -> Unsqueeze
// -> Concat -> Reshape), Constant nodes, masks built from constants. With
// fixed input sizes every such value is a constant, so the run-time graph
// holds only the ops that touch activations and weights.
#include <optional>
#include <vector>

#include "core/tensor.h"
#include "onnx/op.h"
#include "onnx/onnx_proto.h"

namespace pd::onnx {

// A constant as a tensor: F32 for floating types, I64 for integer and bool.
Tensor tensor_from_value(const TensorValue& v);

// Evaluates `node` on known inputs (undefined Tensors for omitted ones).
// Returns nothing when the op cannot be evaluated at import; throws a
// UserError naming the node when its inputs are malformed.
std::optional<std::vector<Tensor>> fold_node(const Node& node, const std::vector<Tensor>& inputs);

// Shape(x) of a run-time tensor whose (export-time) shape is known.
Tensor shape_constant(const Node& node, const Shape& shape);

}  // namespace pd::onnx
