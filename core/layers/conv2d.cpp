#include <cmath>

#include "core/cpu/conv_kernels.h"
#include "core/error.h"
#include "core/layers.h"

namespace pd {

namespace {

class Conv2d : public Layer {
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
    uint64_t next = 0;
    for (Tensor& p : params) {
      float* v = p.f32();
      for (int64_t i = 0; i < p.numel(); ++i) v[i] = bound * (2.0f * rng.uniform(next++) - 1.0f);
    }
  }

  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[0] != in_)
      throw UserError(cat(describe(), " expects input [", in_, ", H, W], got ", shape_str(in)));
    cpu::ConvShape s = conv_shape(1, in);
    if (in[1] + 2 * padding_ < kernel_ || in[2] + 2 * padding_ < kernel_)
      throw UserError(cat(describe(), ": input ", shape_str(in), " is smaller than the kernel"));
    return {out_, s.out_height(), s.out_width()};
  }

  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    PD_CHECK(x.ndim() == 4, describe(), " got input ", shape_str(x.shape()));
    Shape out = output_shape({x.dim(1), x.dim(2), x.dim(3)});
    cpu::ConvShape s = conv_shape(x.dim(0), {x.dim(1), x.dim(2), x.dim(3)});
    Tensor y = Tensor::empty({x.dim(0), out[0], out[1], out[2]});
    cpu::conv2d_forward(s, x.f32(), a.params[0].f32(), bias_ ? a.params[1].f32() : nullptr, y.f32());
    ctx.saved = {x};
    return y;
  }

  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 1, describe(), ": backward without forward");
    const Tensor x = ctx.saved[0];
    cpu::ConvShape s = conv_shape(x.dim(0), {x.dim(1), x.dim(2), x.dim(3)});
    Tensor dx = a.need_input_grad ? Tensor::empty(x.shape()) : Tensor();
    cpu::conv2d_backward(s, x.f32(), a.params[0].f32(), dy.f32(), dx.defined() ? dx.f32() : nullptr,
                         a.grads[0].f32(), bias_ ? a.grads[1].f32() : nullptr);
    ctx.saved.clear();
    return dx;
  }

 private:
  cpu::ConvShape conv_shape(int64_t batch, const Shape& in) const {
    cpu::ConvShape s;
    s.batch = batch;
    s.in_channels = in[0];
    s.height = in[1];
    s.width = in[2];
    s.out_channels = out_;
    s.kernel = kernel_;
    s.stride = stride_;
    s.padding = padding_;
    return s;
  }

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
