// MaxPool2d, AvgPool2d and AdaptiveAvgPool2d (NCHW, square windows).
#include "core/device_ops.h"
#include "core/error.h"
#include "core/layers.h"

namespace pd {

namespace {

Shape chw(const Layer& l, const Shape& in) {
  if (in.size() != 3) throw UserError(cat(l.describe(), " expects input [C, H, W], got ", shape_str(in)));
  return in;
}

// What forward saves for backward is what the backend's backward reads
// (DeviceOps::pool_backward_reads_tensors): x and y for cuDNN; for the CPU
// only the input's shape (a few ints), plus the argmax for max pooling.
void save_for_backward(const DeviceOps& ops, const Tensor& x, const Tensor& y, const Tensor& argmax,
                       LayerContext& ctx) {
  if (ops.pool_backward_reads_tensors) {
    ctx.saved = {x, y};
    return;
  }
  ctx.saved = {Tensor::from_ints({int32_t(x.dim(0)), int32_t(x.dim(1)), int32_t(x.dim(2)), int32_t(x.dim(3))}, {4})};
  if (argmax.defined()) ctx.saved.push_back(argmax);
}

// The saved tensors as backward arguments.
struct Saved {
  Shape input;
  const float* x = nullptr;
  const float* y = nullptr;
  const int32_t* argmax = nullptr;
};
Saved saved_for_backward(const DeviceOps& ops, const LayerContext& ctx) {
  Saved s;
  if (ops.pool_backward_reads_tensors) {
    PD_CHECK(ctx.saved.size() == 2, "pooling: backward without a forward on this device");
    s.input = ctx.saved[0].shape();
    s.x = ctx.saved[0].f32();
    s.y = ctx.saved[1].f32();
    return s;
  }
  const int32_t* d = ctx.saved.at(0).data<int32_t>();
  s.input = {d[0], d[1], d[2], d[3]};
  if (ctx.saved.size() > 1) s.argmax = ctx.saved[1].data<int32_t>();
  return s;
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
  // Max pooling picks one input per window; its backward puts each output
  // gradient on one input, adding two only where windows overlap.
  bool forward_keeps_bf16() const override { return max_; }
  bool backward_keeps_bf16() const override { return max_ && kernel_ <= stride_; }
  std::string describe() const override {
    return cat(type(), "(k", kernel_, ", s", stride_, ", p", padding_, ")");
  }
  Shape output_shape(const Shape& in) const override {
    chw(*this, in);
    if (in[1] + 2 * padding_ < kernel_ || in[2] + 2 * padding_ < kernel_)
      throw UserError(cat(describe(), ": input ", shape_str(in), " is smaller than the window"));
    const Pool2dGeometry g = geometry({1, in[0], in[1], in[2]});
    return {in[0], g.out_h(), g.out_w()};
  }

  Tensor forward(const ForwardArgs&, const Tensor& x, LayerContext& ctx) const override {
    PD_CHECK(x.ndim() == 4, describe(), " got input ", shape_str(x.shape()));
    const Shape out = output_shape({x.dim(1), x.dim(2), x.dim(3)});
    const DeviceOps& ops = device_ops(x.device());
    Tensor y = Tensor::empty({x.dim(0), out[0], out[1], out[2]}, DType::F32, x.device());
    Tensor argmax = max_ && !ops.pool_backward_reads_tensors ? Tensor::empty(y.shape(), DType::I32, x.device())
                                                            : Tensor();
    ops.pool2d_forward_indexed(kind(), geometry(x.shape()), x.f32(), y.f32(),
                               argmax.defined() ? argmax.data<int32_t>() : nullptr);
    save_for_backward(ops, x, y, argmax, ctx);
    return y;
  }

  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(!ctx.saved.empty(), describe(), ": backward without forward");
    Tensor dx;
    if (a.need_input_grad) {
      const DeviceOps& ops = device_ops(dy.device());
      const Saved s = saved_for_backward(ops, ctx);
      dx = Tensor::empty(s.input, DType::F32, dy.device());
      ops.pool2d_backward_indexed(kind(), geometry(s.input), s.x, s.y, s.argmax, dy.f32(), dx.f32());
    }
    ctx.saved.clear();
    return dx;
  }

 private:
  PoolKind kind() const { return max_ ? PoolKind::Max : PoolKind::Average; }
  Pool2dGeometry geometry(const Shape& nchw) const {
    Pool2dGeometry g;
    g.batch = nchw[0];
    g.channels = nchw[1];
    g.in_h = nchw[2];
    g.in_w = nchw[3];
    g.square_window(kernel_, stride_, padding_);
    return g;
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
    const DeviceOps& ops = device_ops(x.device());
    Tensor y = Tensor::empty({x.dim(0), x.dim(1), oh_, ow_}, DType::F32, x.device());
    ops.adaptive_avgpool2d_forward(x.dim(0) * x.dim(1), x.dim(2), x.dim(3), oh_, ow_, x.f32(), y.f32());
    save_for_backward(ops, x, y, Tensor(), ctx);
    return y;
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(!ctx.saved.empty(), describe(), ": backward without forward");
    Tensor dx;
    if (a.need_input_grad) {
      const DeviceOps& ops = device_ops(dy.device());
      const Saved s = saved_for_backward(ops, ctx);
      dx = Tensor::empty(s.input, DType::F32, dy.device());
      ops.adaptive_avgpool2d_backward(s.input[0] * s.input[1], s.input[2], s.input[3], oh_, ow_, s.x, s.y, dy.f32(),
                                      dx.f32());
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
