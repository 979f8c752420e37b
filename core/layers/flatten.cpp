#include <algorithm>
#include <vector>

#include "core/error.h"
#include "core/layers.h"

namespace pd {

namespace {

// [N, d1, d2, ...] -> [N, d1*d2*...]; a reshape sharing storage.
class Flatten : public Layer {
 public:
  std::string type() const override { return "flatten"; }
  bool forward_keeps_bf16() const override { return true; }
  bool backward_keeps_bf16() const override { return true; }
  Shape output_shape(const Shape& in) const override {
    if (in.empty()) throw UserError("flatten expects a per-sample input with at least one dimension");
    return {shape_numel(in)};
  }
  Tensor forward(const ForwardArgs&, const Tensor& x, LayerContext& ctx) const override {
    PD_CHECK(x.ndim() >= 1, "flatten got a scalar");
    // Keep only the input's shape (a few ints), not its data.
    std::vector<int32_t> dims(x.shape().begin(), x.shape().end());
    ctx.saved = {Tensor::from_ints(dims, {static_cast<int64_t>(dims.size())})};
    return x.reshape({x.dim(0), x.numel() / std::max<int64_t>(x.dim(0), 1)});
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 1, "flatten: backward without forward");
    Tensor dx;
    if (a.need_input_grad) {
      const Tensor& d = ctx.saved[0];
      Shape in(d.data<int32_t>(), d.data<int32_t>() + d.numel());
      dx = dy.reshape(in);
    }
    ctx.saved.clear();
    return dx;
  }
};

}  // namespace

LayerPtr make_flatten() { return std::make_unique<Flatten>(); }

}  // namespace pd
