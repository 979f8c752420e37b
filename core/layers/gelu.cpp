#include "core/device_ops.h"
#include "core/layers.h"

namespace pd {

namespace {

class Gelu : public Layer {
 public:
  std::string type() const override { return "gelu"; }
  Shape output_shape(const Shape& in) const override { return in; }
  Tensor forward(const ForwardArgs&, const Tensor& x, LayerContext& ctx) const override {
    Tensor y = Tensor::empty(x.shape(), DType::F32, x.device());
    device_ops(x.device()).gelu_forward(x.numel(), x.f32(), y.f32());
    ctx.saved = {x};
    return y;
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    Tensor dx;
    if (a.need_input_grad) {
      const Tensor& x = ctx.saved.at(0);
      dx = Tensor::empty(x.shape(), DType::F32, dy.device());
      device_ops(dy.device()).gelu_backward(x.numel(), x.f32(), dy.f32(), dx.f32());
    }
    ctx.clear();
    return dx;
  }
};

}  // namespace

LayerPtr make_gelu() { return std::make_unique<Gelu>(); }

}  // namespace pd
