// ReduceMean and ReduceSum over constant axes (never the batch): LayerNorm
// as opset 13 exports it (ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div).
// Backward broadcasts dy back over the reduced axes.
#include <algorithm>

#include "core/device_ops.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

class ReduceOp : public Op {
 public:
  ReduceOp(std::string type, std::vector<int> axes_from_end, bool keepdims)
      : type_(std::move(type)), axes_(std::move(axes_from_end)), keepdims_(keepdims) {}
  std::string type() const override { return type_; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    const Shape kept = kept_shape(x.shape());
    Tensor y = reduce_to(x, kept);  // sums
    if (type_ == "ReduceMean") {
      Tensor mean = Tensor::empty(kept, DType::F32, x.device());
      device_ops(x.device()).divide(y.numel(), count(x.shape(), kept), y.f32(), mean.f32());
      y = mean;
    } else if (y.same_storage(x)) {
      y = y.clone();
    }
    ctx.saved = {shape_tensor(x.shape())};
    return {keepdims_ ? y : y.reshape(dropped_shape(x.shape()))};
  }

  // dx = dy broadcast over the reduced axes, divided by the count (1 for ReduceSum).
  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      const Shape in = shape_from_tensor(ctx.saved[0]);
      const Shape kept = kept_shape(in);
      const Tensor dy = dys[0].reshape(kept);
      const Device dev = dy.device();
      const Tensor divisor = Tensor::full({1}, count(in, kept), dev);
      const std::vector<int64_t> s = broadcast_strides(kept, in), scalar(in.size(), 0);
      Tensor dx = Tensor::empty(in, DType::F32, dev);
      device_ops(dev).broadcast_binary(BinaryArith::Div, static_cast<int>(in.size()), in.data(), s.data(),
                                       scalar.data(), dy.f32(), divisor.f32(), dx.f32());
      g[0] = dx;
    }
    ctx.clear();
    return g;
  }

 private:
  Shape kept_shape(const Shape& s) const {
    Shape k = s;
    const int r = static_cast<int>(s.size());
    for (int a : axes_) k[size_t(a + r)] = 1;
    return k;
  }
  Shape dropped_shape(const Shape& s) const {
    Shape out;
    const int r = static_cast<int>(s.size());
    for (int d = 0; d < r; ++d)
      if (std::find(axes_.begin(), axes_.end(), d - r) == axes_.end()) out.push_back(s[size_t(d)]);
    return out;
  }
  // What the sums are divided by: the elements per mean, 1 for ReduceSum.
  float count(const Shape& in, const Shape& kept) const {
    if (type_ != "ReduceMean") return 1.0f;
    return static_cast<float>(shape_numel(in) / std::max<int64_t>(1, shape_numel(kept)));
  }
  std::string type_;
  std::vector<int> axes_;  // negative: counted from the end
  bool keepdims_;
};

}  // namespace

OpPtr make_reduce_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.dtype() != DType::F32) unsupported(n, "expects a float input");
  std::vector<int64_t> axes = in.example.size() > 1 && in.example[1].defined() ? const_ints(n, in, 1) : n.ints_attr("axes");
  if (axes.empty()) unsupported(n, "reducing over every axis (the batch too) is not supported");
  if (n.int_attr("noop_with_empty_axes", 0) != 0) unsupported(n, "noop_with_empty_axes is not supported");
  check_strided_rank(n, x.shape());
  std::vector<int> from_end;
  for (int64_t a : axes) {
    const int axis = normalize_axis(n, a, x.ndim());
    if (axis == in.batch_axis(0)) unsupported(n, "reducing over the batch dimension is not supported");
    from_end.push_back(axis - x.ndim());
  }
  return std::make_unique<ReduceOp>(n.op_type, from_end, n.int_attr("keepdims", 1) != 0);
}

}  // namespace pd::onnx
