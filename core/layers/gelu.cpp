#include "core/cpu/gelu_kernels.h"
#include "core/layers.h"

namespace pd {

namespace {

class Gelu : public Layer {
 public:
  std::string type() const override { return "gelu"; }
  Shape output_shape(const Shape& in) const override { return in; }
  Tensor forward(const ForwardArgs&, const Tensor& x, LayerContext& ctx) const override {
    Tensor y = Tensor::empty(x.shape());
    cpu::gelu_forward(x.f32(), y.f32(), x.numel());
    ctx.saved = {x};
    return y;
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    Tensor dx;
    if (a.need_input_grad) {
      const Tensor& x = ctx.saved.at(0);
      dx = Tensor::empty(x.shape());
      cpu::gelu_backward(x.f32(), dy.f32(), dx.f32(), x.numel());
    }
    ctx.clear();
    return dx;
  }
};

}  // namespace

LayerPtr make_gelu() { return std::make_unique<Gelu>(); }

}  // namespace pd
