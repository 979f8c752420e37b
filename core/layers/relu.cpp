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
  Shape output_shape(const Shape& in) const override { return in; }
  Tensor forward(const ForwardArgs&, const Tensor& x, LayerContext& ctx) const override {
    Tensor y = Tensor::empty(x.shape(), DType::F32, x.device());
    device_ops(x.device()).relu_forward(x.numel(), x.f32(), y.f32());
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
