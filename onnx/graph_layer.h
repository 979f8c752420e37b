#pragma once
// OnnxSegment: a top-level layer that runs a piece of an imported ONNX
// graph as a small DAG interpreter. It takes one tensor and returns one
// tensor like every core layer, so the chain runtime (train, profile, plan,
// run) needs no change; inside, residual joins, attention and
// concatenations have any shape.
//
// Its boundaries may carry several tensors (a stage cut through a residual
// block carries the block input and the branch): they travel packed per
// sample, [batch, sum of the tensors' per-sample sizes], so microbatches
// still split along the batch and the transport sends one message.
// Tensors the segment does not read but a later one does pass through.
// A boundary of one tensor is that tensor itself (no copy).
#include <memory>
#include <string>
#include <vector>

#include "core/layer.h"
#include "onnx/op.h"

namespace pd::onnx {

// Where a node input comes from at run time.
struct InputRef {
  // BatchSize: the segment's run-time batch, an I64 scalar [1] (Expand to the batch).
  enum Kind { Absent, Slot, Param, Buffer, Constant, BatchSize } kind = Absent;
  int index = 0;     // slot, parameter or buffer index
  Tensor constant;   // Kind::Constant
};

struct SegmentNode {
  std::string label;                // "node 'Conv_3' (Conv)"
  OpPtr op;
  std::vector<InputRef> inputs;
  std::vector<int> outputs;         // slot per op output, -1 where nobody reads it
  // The node's index in the graph: its dropout stream, whatever layer runs it.
  uint32_t key = 0;
  int unit = 0;                     // ModelGraph unit, for UnitClock
};

// One tensor of a segment boundary: its slot and per-sample shape.
struct BoundaryTensor {
  int slot = 0;
  Shape sample;
};

// A parameter's or buffer's initial value: a tensor in memory, or an
// initializer left in the model's file (TensorValue::stored), read only
// when a process builds the layer that holds it.
struct InitialValue {
  std::shared_ptr<const Tensor> tensor;
  std::shared_ptr<const TensorValue> stored;
  void write_to(Tensor& dst) const;
};

struct SegmentSpec {
  std::vector<SegmentNode> nodes;
  int slots = 0;
  std::vector<BoundaryTensor> inputs, outputs;  // in packing order
  std::vector<ParamSpec> params, buffers;  // ONNX initializer names
  std::vector<InitialValue> param_init, buffer_init;  // initial values
  Shape sample_in, sample_out;      // per sample: the tensor's, or [packed size] for several
  DType input_dtype = DType::F32;
};

LayerPtr make_onnx_segment(SegmentSpec spec);

}  // namespace pd::onnx
