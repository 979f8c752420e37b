#pragma once
// OnnxSegment: a top-level layer that runs a piece of an imported ONNX
// graph - the nodes between two single-tensor cuts - as a small DAG
// interpreter. It takes one tensor and returns one tensor like every core
// layer, so the chain runtime (train, profile, plan, run) needs no change;
// inside, residual joins, attention and concatenations have any shape.
#include <memory>
#include <string>
#include <vector>

#include "core/layer.h"
#include "onnx/op.h"

namespace pd::onnx {

// Where a node input comes from at run time.
struct InputRef {
  enum Kind { Absent, Slot, Param, Buffer, Constant } kind = Absent;
  int index = 0;     // slot, parameter or buffer index
  Tensor constant;   // Kind::Constant
};

struct SegmentNode {
  std::string label;                // "node 'Conv_3' (Conv)"
  OpPtr op;
  std::vector<InputRef> inputs;
  std::vector<int> outputs;         // slot per op output, -1 where nobody reads it
  // Dropout masks are keyed per node: the step's layer index is mixed with this.
  uint32_t key = 0;
};

struct SegmentSpec {
  std::vector<SegmentNode> nodes;
  int slots = 1;                    // slot 0: the segment's input
  int output_slot = 0;
  std::vector<ParamSpec> params, buffers;  // ONNX initializer names
  std::vector<std::shared_ptr<const Tensor>> param_init, buffer_init;  // initial values
  Shape sample_in, sample_out;      // per sample (no batch dimension)
  DType input_dtype = DType::F32;
};

LayerPtr make_onnx_segment(SegmentSpec spec);

}  // namespace pd::onnx
