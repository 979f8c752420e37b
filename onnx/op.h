#pragma once
// An imported ONNX node as a function of many tensors: the runtime form of
// one node inside an OnnxSegment (see graph_layer.h). Like core layers, ops
// hold only hyper-parameters; the tensors they read (activations,
// parameters, buffers, import-time constants) come in through `inputs`, in
// the node's input order. Backward returns one gradient per input, an
// undefined Tensor where none is needed; the segment adds them up.
// Ops run on whatever device their inputs live on: they allocate there and
// reach kernels through device_ops(x.device()) (core/device_ops.h), with
// no per-device branch; shape metadata they keep for backward (small i32
// tensors) and the batch size stay on the host.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/layer.h"
#include "onnx/onnx_proto.h"

namespace pd::onnx {

class Op {
 public:
  virtual ~Op() = default;
  virtual std::string type() const = 0;  // the ONNX op_type
  // inputs: undefined Tensors for omitted optional inputs. A BatchNormalization
  // gets its running statistics as inputs 3 and 4 and updates them in place.
  virtual std::vector<Tensor> forward(std::span<const Tensor> inputs, const StepInfo& step,
                                      LayerContext& ctx) const = 0;
  // dys: one per output, undefined where no gradient reaches that output.
  // need[k]: whether input k needs its gradient. Consumes ctx.
  virtual std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need,
                                       const StepInfo& step, LayerContext& ctx) const = 0;
};
using OpPtr = std::unique_ptr<Op>;

// Where a run-time tensor holds the batch: dimension `axis` has size
// outer * batch * inner, the batch merged with neighbouring dimensions by a
// Reshape (multi-head attention's [T, N*H, d] and [T*N, E]). The standard
// layout (axis 0, outer = inner = 1) is the only one that crosses layers.
struct BatchLayout {
  int axis = 0;
  int64_t outer = 1, inner = 1;
  bool standard() const { return axis == 0 && outer == 1 && inner == 1; }
  bool operator==(const BatchLayout&) const = default;
};

// What the importer knows of a node's inputs when it builds the op: per
// input, an example tensor (the traced value at the export batch size, or
// the constant itself) and whether it is an import-time constant.
struct OpInputs {
  std::vector<Tensor> example;        // undefined for an omitted input
  std::vector<bool> constant;         // value known at import (initializer that is no parameter, folded)
  std::vector<bool> batched;          // holds the batch (derived from the model input)
  std::vector<BatchLayout> layout;    // where, for a batched input (standard when absent)
  int64_t batch = 0;                  // the export batch size
  const Tensor& at(size_t k) const;   // example k; a UserError naming the node when absent
  // The dimension of input k that holds the batch, -1 when it has none.
  int batch_axis(size_t k) const;
  BatchLayout layout_of(size_t k) const { return k < layout.size() ? layout[k] : BatchLayout{}; }
};

// Builds the op for a node (UserError naming the node and op when the node
// uses an attribute value or input form the importer does not support).
OpPtr make_op(const Node& node, const OpInputs& in);
// Whether make_op knows the op type.
bool is_supported_op(const std::string& op_type);
std::vector<std::string> supported_ops();

}  // namespace pd::onnx
