// Gather along one axis: embedding lookups (a parameter table indexed by
// run-time token ids) and constant position indices, as an index selection
// (DeviceOps::index_select_*). The gradient of the data is a scatter-add in
// index order; indices get none.
#include "core/device_ops.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

class GatherOp : public Op {
 public:
  explicit GatherOp(int axis) : axis_(axis) {}
  std::string type() const override { return "Gather"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &data = in[0], &idx = in[1];
    int64_t outer, len, inner;
    split(data.shape(), outer, len, inner);
    Shape out(data.shape().begin(), data.shape().begin() + axis_);
    out.insert(out.end(), idx.shape().begin(), idx.shape().end());
    out.insert(out.end(), data.shape().begin() + axis_ + 1, data.shape().end());
    Tensor y = Tensor::empty(out, DType::F32, data.device());
    PD_CHECK(idx.device() == data.device(), "Gather: indices on ", idx.device().str(), ", data on ", data.device().str());
    if (!device_ops(data.device())
             .index_select_forward(outer, len, inner, idx.numel(), idx.dtype(), idx.raw(), data.f32(), y.f32()))
      throw UserError(cat("Gather: an index lies outside [", -len, ", ", len, ") (a token id beyond the vocabulary?)"));
    ctx.saved = {idx, shape_tensor(data.shape())};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(2);
    if (need[0]) {
      const Tensor &idx = ctx.saved[0], &dy = dys[0];
      const Shape ds = shape_from_tensor(ctx.saved[1]);
      int64_t outer, len, inner;
      split(ds, outer, len, inner);
      Tensor dd = Tensor::zeros(ds, DType::F32, dy.device());
      device_ops(dy.device())
          .index_select_backward_accum(outer, len, inner, idx.numel(), idx.dtype(), idx.raw(), dy.f32(), dd.f32());
      g[0] = dd;
    }
    ctx.clear();
    return g;
  }

 private:
  void split(const Shape& s, int64_t& outer, int64_t& len, int64_t& inner) const {
    outer = inner = 1;
    for (int d = 0; d < axis_; ++d) outer *= s[size_t(d)];
    len = s[size_t(axis_)];
    for (size_t d = size_t(axis_) + 1; d < s.size(); ++d) inner *= s[d];
  }
  int axis_;
};

}  // namespace

OpPtr make_gather_op(const Node& n, const OpInputs& in) {
  const Tensor &data = in.at(0), &idx = in.at(1);
  if (data.dtype() != DType::F32) unsupported(n, "gathering from an integer tensor at run time is not supported");
  if (idx.dtype() != DType::I32 && idx.dtype() != DType::I64) unsupported(n, "indices must be integers");
  const int axis = normalize_axis(n, n.int_attr("axis", 0), data.ndim());
  if (axis == in.batch_axis(0)) unsupported(n, "gathering along the batch dimension is not supported");
  if (in.batched[0] && in.batched[1]) unsupported(n, "run-time indices into a run-time tensor are not supported");
  if (in.batched[1] && axis != 0) unsupported(n, "run-time indices are supported along axis 0 (embeddings) only");
  if (in.batched[1] && !in.layout_of(1).standard()) unsupported(n, "run-time indices must hold the batch first");
  return std::make_unique<GatherOp>(axis);
}

}  // namespace pd::onnx
