#pragma once
// Factories of the ONNX ops, one file per op (or per family of ops sharing
// one kernel: the broadcasting binary arithmetic, the unary elementwise
// functions, the view ops, the core-layer adapters). Each checks the
// node's attributes and constant inputs and throws a UserError naming the
// node for anything it does not support.
#include "onnx/op.h"

namespace pd::onnx {

// Conv, BatchNormalization, Relu, MaxPool, AveragePool, GlobalAveragePool,
// Gemm, LayerNormalization, Dropout: adapters over the core layers.
OpPtr make_core_layer_op(const Node& n, const OpInputs& in);
// Add, Sub, Mul, Div with numpy broadcasting.
OpPtr make_binary_op(const Node& n, const OpInputs& in);
// Erf, Tanh, Sqrt, Sigmoid, Neg, Pow (constant exponent), Clip, Identity, Cast (float to float),
// Sin, Cos, Exp, Reciprocal, HardSigmoid, HardSwish.
OpPtr make_unary_op(const Node& n, const OpInputs& in);
OpPtr make_matmul_op(const Node& n, const OpInputs& in);
// Gemm other than a linear layer: transA, transB, alpha, beta, C broadcast.
OpPtr make_gemm_op(const Node& n, const OpInputs& in);
OpPtr make_transpose_op(const Node& n, const OpInputs& in);
// Reshape, Flatten, Squeeze, Unsqueeze: a new per-sample shape, same data.
OpPtr make_view_op(const Node& n, const OpInputs& in);
OpPtr make_softmax_op(const Node& n, const OpInputs& in);
OpPtr make_gather_op(const Node& n, const OpInputs& in);
OpPtr make_where_op(const Node& n, const OpInputs& in);
OpPtr make_slice_op(const Node& n, const OpInputs& in);
OpPtr make_split_op(const Node& n, const OpInputs& in);
OpPtr make_concat_op(const Node& n, const OpInputs& in);
// Conv beyond the core conv2d: groups, rectangular kernels, per-axis strides, per-side pads.
OpPtr make_general_conv_op(const Node& n, const OpInputs& in);
// MaxPool / AveragePool beyond the core pools: ceil_mode, rectangular
// kernels, per-side pads, count_include_pad=0.
OpPtr make_pool_op(const Node& n, const OpInputs& in);
// ReduceMean, ReduceSum over constant axes (opset 13's LayerNorm decomposition).
OpPtr make_reduce_op(const Node& n, const OpInputs& in);
// Expand of a run-time tensor, or of a parameter to the batch.
OpPtr make_expand_op(const Node& n, const OpInputs& in);
// Whether an Expand of an unbatched input to `out` makes the batch (out's
// first dimension is the export batch, the input's is 1): the op then
// reads the run-time batch from an extra last input (InputRef::BatchSize).
bool expand_creates_batch(const OpInputs& in, const Shape& out);
// Pad (constant mode; never the batch dimension).
OpPtr make_pad_op(const Node& n, const OpInputs& in);

}  // namespace pd::onnx
