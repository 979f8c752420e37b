// MaxPool2d, AvgPool2d and AdaptiveAvgPool2d (NCHW, square windows).
#include "core/cpu/pool_kernels.h"
#include "core/error.h"
#include "core/layers.h"

namespace pd {

namespace {

Shape chw(const Layer& l, const Shape& in) {
  if (in.size() != 3) throw UserError(cat(l.describe(), " expects input [C, H, W], got ", shape_str(in)));
  return in;
}

class WindowPool : public Layer {
 public:
  WindowPool(bool max, int kernel, int stride, int padding)
      : max_(max), kernel_(kernel), stride_(stride < 0 ? kernel : stride), padding_(padding) {
    if (kernel < 1) throw UserError(cat(type(), ": kernel must be at least 1, got ", kernel));
    if (stride_ < 1) throw UserError(cat(type(), ": stride must be at least 1, got ", stride));
    if (padding < 0 || padding > kernel / 2)
      throw UserError(cat(type(), ": padding must be between 0 and kernel/2 = ", kernel / 2, ", got ", padding));
  }
  std::string type() const override { return max_ ? "maxpool2d" : "avgpool2d"; }
  std::string describe() const override {
    return cat(type(), "(k", kernel_, ", s", stride_, ", p", padding_, ")");
  }
  Shape output_shape(const Shape& in) const override {
    cpu::PoolShape s = pool_shape(1, chw(*this, in));
    if (in[1] + 2 * padding_ < kernel_ || in[2] + 2 * padding_ < kernel_)
      throw UserError(cat(describe(), ": input ", shape_str(in), " is smaller than the window"));
    return {in[0], s.out_height(), s.out_width()};
  }

  Tensor forward(const ForwardArgs&, const Tensor& x, LayerContext& ctx) const override {
    PD_CHECK(x.ndim() == 4, describe(), " got input ", shape_str(x.shape()));
    Shape out = output_shape({x.dim(1), x.dim(2), x.dim(3)});
    cpu::PoolShape s = pool_shape(x.dim(0), {x.dim(1), x.dim(2), x.dim(3)});
    Tensor y = Tensor::empty({x.dim(0), out[0], out[1], out[2]});
    // Backward needs only the input's shape, plus the argmax for max pooling.
    Tensor in_shape = Tensor::from_ints({int32_t(x.dim(0)), int32_t(x.dim(1)), int32_t(x.dim(2)),
                                         int32_t(x.dim(3))}, {4});
    if (max_) {
      Tensor arg = Tensor::empty(y.shape(), DType::I32);
      cpu::maxpool2d_forward(s, x.f32(), y.f32(), arg.data<int32_t>());
      ctx.saved = {in_shape, arg};
    } else {
      cpu::avgpool2d_forward(s, x.f32(), y.f32());
      ctx.saved = {in_shape};
    }
    return y;
  }

  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(!ctx.saved.empty(), describe(), ": backward without forward");
    Tensor dx;
    if (a.need_input_grad) {
      const int32_t* d = ctx.saved[0].data<int32_t>();
      dx = Tensor::empty({d[0], d[1], d[2], d[3]});
      cpu::PoolShape s = pool_shape(d[0], {d[1], d[2], d[3]});
      if (max_)
        cpu::maxpool2d_backward(s, dy.f32(), ctx.saved[1].data<int32_t>(), dx.f32());
      else
        cpu::avgpool2d_backward(s, dy.f32(), dx.f32());
    }
    ctx.saved.clear();
    return dx;
  }

 private:
  cpu::PoolShape pool_shape(int64_t batch, const Shape& in) const {
    cpu::PoolShape s;
    s.planes = batch * in[0];
    s.height = in[1];
    s.width = in[2];
    s.kernel = kernel_;
    s.stride = stride_;
    s.padding = padding_;
    return s;
  }

  bool max_;
  int kernel_, stride_, padding_;
};

class AdaptiveAvgPool : public Layer {
 public:
  AdaptiveAvgPool(int out_h, int out_w) : oh_(out_h), ow_(out_w) {
    if (out_h < 1 || out_w < 1)
      throw UserError(cat("adaptive_avgpool2d: output size must be positive, got ", out_h, "x", out_w));
  }
  std::string type() const override { return "adaptive_avgpool2d"; }
  std::string describe() const override { return cat(type(), "(", oh_, "x", ow_, ")"); }
  Shape output_shape(const Shape& in) const override {
    chw(*this, in);
    return {in[0], oh_, ow_};
  }
  Tensor forward(const ForwardArgs&, const Tensor& x, LayerContext& ctx) const override {
    PD_CHECK(x.ndim() == 4, describe(), " got input ", shape_str(x.shape()));
    Tensor y = Tensor::empty({x.dim(0), x.dim(1), oh_, ow_});
    cpu::adaptive_avgpool2d_forward(x.dim(0) * x.dim(1), x.dim(2), x.dim(3), oh_, ow_, x.f32(), y.f32());
    ctx.saved = {Tensor::from_ints({int32_t(x.dim(0)), int32_t(x.dim(1)), int32_t(x.dim(2)),
                                    int32_t(x.dim(3))}, {4})};
    return y;
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(!ctx.saved.empty(), describe(), ": backward without forward");
    Tensor dx;
    if (a.need_input_grad) {
      const int32_t* d = ctx.saved[0].data<int32_t>();
      dx = Tensor::empty({d[0], d[1], d[2], d[3]});
      cpu::adaptive_avgpool2d_backward(int64_t(d[0]) * d[1], d[2], d[3], oh_, ow_, dy.f32(), dx.f32());
    }
    ctx.saved.clear();
    return dx;
  }

 private:
  int64_t oh_, ow_;
};

}  // namespace

LayerPtr make_maxpool2d(int kernel, int stride, int padding) {
  return std::make_unique<WindowPool>(true, kernel, stride, padding);
}
LayerPtr make_avgpool2d(int kernel, int stride, int padding) {
  return std::make_unique<WindowPool>(false, kernel, stride, padding);
}
LayerPtr make_adaptive_avgpool2d(int out_h, int out_w) {
  return std::make_unique<AdaptiveAvgPool>(out_h, out_w);
}

}  // namespace pd
