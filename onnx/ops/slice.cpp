// Slice with constant starts/ends/axes/steps (positive steps), never
// along the batch dimension. Backward scatters dy into zeros.
#include <algorithm>
#include <climits>

#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

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
    require_cpu_f32(x, "Slice");
    Shape out;
    int64_t base;
    std::vector<int64_t> src;
    plan(x.shape(), out, base, src);
    Tensor y = Tensor::empty(out);
    const float* xp = x.f32() + base;
    float* yp = y.f32();
    for_each_broadcast(out, src, src, [&](int64_t i, int64_t o, int64_t) { yp[i] = xp[o]; });
    ctx.saved = {shape_tensor(x.shape())};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      Shape in = shape_from_tensor(ctx.saved[0]), out;
      int64_t base;
      std::vector<int64_t> src;
      plan(in, out, base, src);
      Tensor dx = Tensor::zeros(in);
      float* dp = dx.f32() + base;
      const float* gp = dys[0].f32();
      for_each_broadcast(out, src, src, [&](int64_t i, int64_t o, int64_t) { dp[o] = gp[i]; });
      g[0] = dx;
    }
    ctx.clear();
    return g;
  }

 private:
  void plan(const Shape& in, Shape& out, int64_t& base, std::vector<int64_t>& src) const {
    const size_t r = in.size();
    std::vector<int64_t> stride(r, 1);
    for (size_t d = r - 1; d > 0; --d) stride[d - 1] = stride[d] * in[d];
    out = in;
    src = stride;
    base = 0;
    for (size_t d = 0; d < r; ++d) {
      const Range& g = ranges_[d];
      if (g.count < 0) continue;  // untouched axis
      out[d] = g.count;
      base += g.start * stride[d];
      src[d] = g.step * stride[d];
    }
  }
  std::vector<Range> ranges_;  // count -1: whole axis
};

}  // namespace

OpPtr make_slice_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.dtype() != DType::F32) unsupported(n, "expects a float input");
  const int r = x.ndim();
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
    if (steps[k] <= 0) unsupported(n, "only positive steps are supported");
    int64_t s = starts[k] < 0 ? starts[k] + len : starts[k];
    int64_t e = ends[k] < 0 ? ends[k] + len : ends[k];
    s = std::clamp<int64_t>(s, 0, len);
    e = std::clamp<int64_t>(e, 0, len);
    const int64_t count = e > s ? (e - s + steps[k] - 1) / steps[k] : 0;
    if (a == in.batch_axis(0)) {
      if (s != 0 || count != len || steps[k] != 1) unsupported(n, "slicing the batch dimension is not supported");
      continue;
    }
    ranges[size_t(a)] = Range{s, count, steps[k]};
  }
  return std::make_unique<SliceOp>(ranges);
}

}  // namespace pd::onnx
