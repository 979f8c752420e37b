// Slice with constant starts/ends/axes/steps (negative steps too), never
// along the batch dimension: a strided copy. Backward copies dy into zeros
// at the same strides.
#include <algorithm>
#include <climits>

#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"
#include "onnx/ops/strided.h"

namespace pd::onnx {

namespace {

struct Range {
  int64_t start = 0, count = 0, step = 1;
};

class SliceOp : public Op {
 public:
  // One range per axis of the input (count -1: the whole axis, always so for the batch).
  SliceOp(std::vector<Range> ranges) : ranges_(std::move(ranges)) {}
  std::string type() const override { return "Slice"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    Shape out;
    int64_t base;
    std::vector<int64_t> src;
    plan(x.shape(), out, base, src);
    Tensor y = Tensor::empty(out, DType::F32, x.device());
    copy_strided(out, x, base, src, y, 0, contiguous_strides(out));
    ctx.saved = {shape_tensor(x.shape())};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      Shape in = shape_from_tensor(ctx.saved[0]), out;
      int64_t base;
      std::vector<int64_t> dst;
      plan(in, out, base, dst);
      Tensor dx = Tensor::zeros(in, DType::F32, dys[0].device());
      copy_strided(out, dys[0], 0, contiguous_strides(out), dx, base, dst);
      g[0] = dx;
    }
    ctx.clear();
    return g;
  }

 private:
  // The slice of a tensor of shape `in`: its shape, the offset of its first
  // element and its strides in the input.
  void plan(const Shape& in, Shape& out, int64_t& base, std::vector<int64_t>& src) const {
    const std::vector<int64_t> stride = contiguous_strides(in);
    out = in;
    src = stride;
    base = 0;
    for (size_t d = 0; d < in.size(); ++d) {
      const Range& g = ranges_[d];
      if (g.count < 0) continue;  // untouched axis
      out[d] = g.count;
      base += g.start * stride[d];
      src[d] = g.step * stride[d];
    }
  }
  std::vector<Range> ranges_;  // count -1: whole axis
};

// ONNX's clamping: starts and ends count from the end when negative, then
// lie in [0, len] (positive steps) or [-1, len - 1] (negative steps).
Range resolve_range(int64_t start, int64_t end, int64_t step, int64_t len) {
  int64_t s = start < 0 ? start + len : start;
  int64_t e = end < 0 ? end + len : end;
  if (step > 0) {
    s = std::clamp<int64_t>(s, 0, len);
    e = std::clamp<int64_t>(e, 0, len);
    return {s, e > s ? 1 + (e - s - 1) / step : 0, step};
  }
  s = std::clamp<int64_t>(s, 0, len - 1);
  e = std::clamp<int64_t>(e, -1, len - 1);
  return {s, s > e ? 1 + (s - e - 1) / -step : 0, step};
}

}  // namespace

OpPtr make_slice_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.dtype() != DType::F32) unsupported(n, "expects a float input");
  const int r = x.ndim();
  if (r > kMaxStridedRank) unsupported(n, cat("rank ", r, " is above the ", kMaxStridedRank, " supported"));
  const std::vector<int64_t> starts = const_ints(n, in, 1), ends = const_ints(n, in, 2);
  std::vector<int64_t> axes, steps;
  if (in.example.size() > 3 && in.example[3].defined()) axes = const_ints(n, in, 3);
  if (in.example.size() > 4 && in.example[4].defined()) steps = const_ints(n, in, 4);
  if (axes.empty())
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    unsupported(n, "starts, ends, axes and steps differ in length");
  std::vector<Range> ranges(static_cast<size_t>(r), Range{0, -1, 1});
  for (size_t k = 0; k < starts.size(); ++k) {
    const int a = normalize_axis(n, axes[k], r);
    const int64_t len = x.dim(a);
    if (steps[k] == 0) unsupported(n, "a step of 0");
    if (steps[k] == INT64_MIN) unsupported(n, "a step out of range");
    const Range g = len == 0 ? Range{0, 0, steps[k]} : resolve_range(starts[k], ends[k], steps[k], len);
    if (a == in.batch_axis(0)) {
      if (g.start != 0 || g.count != len || g.step != 1) unsupported(n, "slicing the batch dimension is not supported");
      continue;
    }
    ranges[size_t(a)] = g;
  }
  return std::make_unique<SliceOp>(ranges);
}

}  // namespace pd::onnx
