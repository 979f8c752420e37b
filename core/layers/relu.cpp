#include "core/device_ops.h"
#include "core/error.h"
#include "core/layers.h"

namespace pd {

namespace {

// Saves its output (not its input): y > 0 is the mask backward needs, and
// the output is usually kept alive by the next layer anyway.
class Relu : public Layer {
 public:
  std::string type() const override { return "relu"; }
  bool forward_keeps_bf16() const override { return true; }
  bool backward_keeps_bf16() const override { return true; }
  // relu(x) = x <= 0 ? +0 : x on every backend, so relu(round(x)) and
  // round(relu(x)) have the same bits, -0, subnormals and NaN included.
  bool forward_rounds_bf16() const override { return true; }
  bool forward_absorbs_input_rounding() const override { return true; }
  Shape output_shape(const Shape& in) const override { return in; }
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    Tensor y = Tensor::empty(x.shape(), DType::F32, x.device());
    const DeviceOps& ops = device_ops(x.device());
    (a.step.precision == Precision::BF16 ? ops.relu_forward_rounded : ops.relu_forward)(x.numel(), x.f32(), y.f32());
    ctx.saved = {y};
    return y;
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 1, "relu: backward without forward");
    Tensor dx;
    if (a.need_input_grad) {
      const Tensor& y = ctx.saved[0];
      dx = Tensor::empty(y.shape(), DType::F32, dy.device());
      device_ops(dy.device()).relu_backward(y.numel(), y.f32(), dy.f32(), dx.f32());
    }
    ctx.saved.clear();
    return dx;
  }
};

}  // namespace

LayerPtr make_relu() { return std::make_unique<Relu>(); }

}  // namespace pd
