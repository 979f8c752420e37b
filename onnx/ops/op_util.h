#pragma once
// Helpers shared by the ONNX ops: messages, constants read at import,
// numpy broadcasting.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/geometry.h"
#include "core/tensor.h"
#include "onnx/op.h"
#include "onnx/onnx_proto.h"

namespace pd::onnx {

// "node 'Conv_3' (Conv): <why>" as a UserError.
[[noreturn]] void unsupported(const Node& n, const std::string& why);

// A constant input's values as integers (I64 or F32 tensors); UserError
// naming the node when input k is missing or not a constant.
std::vector<int64_t> const_ints(const Node& n, const OpInputs& in, size_t k);
float const_scalar(const Node& n, const OpInputs& in, size_t k);
// Normalises a possibly negative axis against a rank (UserError when out of range).
int normalize_axis(const Node& n, int64_t axis, int rank);

// Where the batch lands when a batched tensor of shape `in` (at the export
// batch, `batch` >= 2), laid out as `l`, is viewed as `out`; nullopt when
// the view splits the batch across dimensions.
std::optional<BatchLayout> reshaped_layout(const Shape& in, const BatchLayout& l, const Shape& out, int64_t batch);

// numpy broadcasting of two shapes (UserError naming the node when they do not broadcast).
Shape broadcast_shapes(const Node& n, const Shape& a, const Shape& b);
Shape broadcast_shapes_rt(const Shape& a, const Shape& b);  // at run time: logic_error
// broadcast_strides and contiguous_strides: core/tensor.h.

// Calls f(out_index, in_offset...) for every element of `out`, with the
// offsets of the broadcast inputs advanced incrementally (an odometer).
template <class F>
void for_each_broadcast(const Shape& out, const std::vector<int64_t>& sa, const std::vector<int64_t>& sb, F&& f) {
  const int rank = static_cast<int>(out.size());
  const int64_t n = shape_numel(out);
  if (n == 0) return;
  std::vector<int64_t> idx(static_cast<size_t>(rank), 0);
  int64_t oa = 0, ob = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, oa, ob);
    for (int d = rank - 1; d >= 0; --d) {
      const size_t u = static_cast<size_t>(d);
      if (++idx[u] < out[u]) {
        oa += sa[u];
        ob += sb[u];
        break;
      }
      oa -= sa[u] * (out[u] - 1);
      ob -= sb[u] * (out[u] - 1);
      idx[u] = 0;
    }
  }
}

// Sums g (shaped `out`) down to `in` (a shape that broadcasts to out), on
// g's device, in a fixed order (DeviceOps::reduce_sum_strided); g itself
// when the shapes are equal.
Tensor reduce_to(const Tensor& g, const Shape& in);

// Rejects (UserError naming the node) a shape with more dimensions than
// the strided DeviceOps entries take.
void check_strided_rank(const Node& n, const Shape& s);

// The window attributes Conv and the pools share, read into g (a
// Conv2dGeometry or Pool2dGeometry whose kernel is already set): refuses
// auto_pad other than NOTSET and dilations other than 1; reads `strides`
// (two positive values) and `pads` (four non-negative values, each below
// the kernel when pads_below_kernel: pools). UserError naming the node.
template <class Geometry>
void read_window(const Node& n, bool pads_below_kernel, Geometry& g);

// A shape kept in a LayerContext for backward (a small i32 tensor), and back.
Tensor shape_tensor(const Shape& s);
Shape shape_from_tensor(const Tensor& t);


}  // namespace pd::onnx
