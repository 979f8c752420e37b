#include <cmath>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/layers.h"
#include "core/layers/sequence_parts.h"

namespace pd {

namespace {

class Conv2d : public SplitBackwardLayer {
 public:
  Conv2d(int64_t in, int64_t out, int kernel, int stride, int padding, bool bias)
      : in_(in), out_(out), kernel_(kernel), stride_(stride), padding_(padding), bias_(bias) {
    if (in < 1 || out < 1) throw UserError(cat("conv2d: channels must be positive, got ", in, " -> ", out));
    if (kernel < 1) throw UserError(cat("conv2d: kernel must be at least 1, got ", kernel));
    if (stride < 1) throw UserError(cat("conv2d: stride must be at least 1, got ", stride));
    if (padding < 0) throw UserError(cat("conv2d: padding must not be negative, got ", padding));
  }

  std::string type() const override { return "conv2d"; }
  std::string describe() const override {
    return cat("conv2d(", in_, "->", out_, ", k", kernel_, ", s", stride_, ", p", padding_,
               bias_ ? "" : ", no bias", ")");
  }
  std::vector<ParamSpec> param_specs() const override {
    std::vector<ParamSpec> p{{"weight", {out_, in_, kernel_, kernel_}}};
    if (bias_) p.push_back({"bias", {out_}});
    return p;
  }

  // torch.nn.Conv2d's default: kaiming_uniform_(a=sqrt(5)) gives weights
  // U(-1/sqrt(fan_in), 1/sqrt(fan_in)); the bias uses the same bound.
  void init(std::span<Tensor> params, std::span<Tensor>, const CounterRng& rng) const override {
    const float bound = 1.0f / std::sqrt(static_cast<float>(in_ * kernel_ * kernel_));
    fill_uniform(params[0], rng, 0, bound);
    if (bias_) fill_uniform(params[1], rng, static_cast<uint64_t>(params[0].numel()), bound);
  }

  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[0] != in_)
      throw UserError(cat(describe(), " expects input [", in_, ", H, W], got ", shape_str(in)));
    if (in[1] + 2 * padding_ < kernel_ || in[2] + 2 * padding_ < kernel_)
      throw UserError(cat(describe(), ": input ", shape_str(in), " is smaller than the kernel"));
    const Conv2dGeometry g = geometry(1, in);
    return {out_, g.out_h(), g.out_w()};
  }

  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    PD_CHECK(x.ndim() == 4, describe(), " got input ", shape_str(x.shape()));
    const Shape out = output_shape({x.dim(1), x.dim(2), x.dim(3)});
    Tensor y = Tensor::empty({x.dim(0), out[0], out[1], out[2]}, DType::F32, x.device());
    device_ops(x.device()).conv2d_forward(a.step.precision, geometry(x), x.f32(), a.params[0].f32(),
                                          bias_ ? a.params[1].f32() : nullptr, y.f32());
    ctx.saved = {x};
    return y;
  }

  // dx only; keeps dy for backward_weights (ctx.saved = {x, dy}).
  Tensor backward_input(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 1, describe(), ": backward without forward");
    const Tensor& x = ctx.saved[0];
    Tensor dx;
    if (a.need_input_grad) {
      dx = Tensor::empty(x.shape(), DType::F32, x.device());
      device_ops(x.device()).conv2d_backward_data(a.step.precision, geometry(x), a.params[0].f32(), dy.f32(), dx.f32());
    }
    ctx.saved.push_back(dy);
    return dx;
  }

  void backward_weights(const BackwardArgs& a, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 2, describe(), ": weight backward without its input backward");
    const Tensor& x = ctx.saved[0];
    device_ops(x.device())
        .conv2d_backward_params_accum(a.step.precision, geometry(x), x.f32(), ctx.saved[1].f32(), a.grads[0].f32(),
                                      bias_ ? a.grads[1].f32() : nullptr);
    ctx.clear();
  }

 private:
  Conv2dGeometry geometry(int64_t batch, const Shape& chw) const {
    Conv2dGeometry g;
    g.batch = batch;
    g.in_channels = chw[0];
    g.in_h = chw[1];
    g.in_w = chw[2];
    g.out_channels = out_;
    g.square_window(kernel_, stride_, padding_);
    return g;
  }
  Conv2dGeometry geometry(const Tensor& x) const { return geometry(x.dim(0), {x.dim(1), x.dim(2), x.dim(3)}); }

  int64_t in_, out_;
  int kernel_, stride_, padding_;
  bool bias_;
};

}  // namespace

LayerPtr make_conv2d(int64_t in_channels, int64_t out_channels, int kernel, int stride, int padding,
                     bool bias) {
  return std::make_unique<Conv2d>(in_channels, out_channels, kernel, stride, padding, bias);
}

}  // namespace pd
