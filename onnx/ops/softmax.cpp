// Softmax over one axis (opset 13 semantics).
#include "core/device_ops.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

class SoftmaxOp : public Op {
 public:
  explicit SoftmaxOp(int64_t axis) : axis_(axis) {}
  std::string type() const override { return "Softmax"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    int64_t outer, len, inner;
    split(x.shape(), outer, len, inner);
    Tensor y = Tensor::empty(x.shape(), DType::F32, x.device());
    device_ops(x.device()).softmax_axis_forward(outer, len, inner, x.f32(), y.f32());
    ctx.saved = {y};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(1);
    if (need[0]) {
      const Tensor &y = ctx.saved[0], &dy = dys[0];
      int64_t outer, len, inner;
      split(y.shape(), outer, len, inner);
      Tensor dx = Tensor::empty(y.shape(), DType::F32, y.device());
      device_ops(y.device()).softmax_axis_backward(outer, len, inner, y.f32(), dy.f32(), dx.f32());
      g[0] = dx;
    }
    ctx.clear();
    return g;
  }

 private:
  void split(const Shape& s, int64_t& outer, int64_t& len, int64_t& inner) const {
    const int64_t r = static_cast<int64_t>(s.size());
    const int64_t a = axis_ < 0 ? axis_ + r : axis_;
    outer = inner = 1;
    for (int64_t d = 0; d < a; ++d) outer *= s[size_t(d)];
    len = s[size_t(a)];
    for (int64_t d = a + 1; d < r; ++d) inner *= s[size_t(d)];
  }
  int64_t axis_;
};

}  // namespace

OpPtr make_softmax_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.dtype() != DType::F32) unsupported(n, "expects a float input");
  const int axis = normalize_axis(n, n.int_attr("axis", -1), x.ndim());
  if (axis == in.batch_axis(0)) unsupported(n, "softmax over the batch dimension is not supported");
  // Kept relative to the end, so it means the same at any batch size.
  return std::make_unique<SoftmaxOp>(axis - x.ndim());
}

}  // namespace pd::onnx
