// Conv beyond the core conv2d layer: groups (the depthwise convolutions of
// MobileNet, EfficientNet and ConvNeXt; ResNeXt), rectangular kernels
// (Inception's 1x7 and 7x1), a stride per axis, a pad per side. One
// Conv2dGeometry describes the node, and the DeviceOps convolution entries
// of the input's device compute it.
#include "core/device_ops.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

class ConvOp : public Op {
 public:
  // window: kernel, strides, pads and groups; the sizes come from each call's tensors.
  explicit ConvOp(Conv2dGeometry window) : window_(window) {}
  std::string type() const override { return "Conv"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo& step, LayerContext& ctx) const override {
    const Tensor &x = in[0], &w = in[1];
    const bool bias = in.size() > 2 && in[2].defined();
    const Conv2dGeometry g = geometry(x, w);
    Tensor y = Tensor::empty({g.batch, g.out_channels, g.out_h(), g.out_w()}, DType::F32, x.device());
    device_ops(x.device()).conv2d_forward(step.precision, g, x.f32(), w.f32(), bias ? in[2].f32() : nullptr, y.f32());
    ctx.saved = {x, w};
    if (bias) ctx.saved.push_back(in[2]);
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo& step,
                               LayerContext& ctx) const override {
    const Tensor &x = ctx.saved[0], &w = ctx.saved[1], &dy = dys[0];
    const bool bias = ctx.saved.size() > 2;
    const Conv2dGeometry g = geometry(x, w);
    const DeviceOps& ops = device_ops(x.device());
    std::vector<Tensor> grads(need.size());
    if (need[0]) {
      grads[0] = Tensor::empty(x.shape(), DType::F32, x.device());
      ops.conv2d_backward_data(step.precision, g, w.f32(), dy.f32(), grads[0].f32());
    }
    const bool want_w = need.size() > 1 && need[1], want_b = bias && need.size() > 2 && need[2];
    if (want_w || want_b) {
      Tensor dw = Tensor::zeros(w.shape(), DType::F32, x.device());
      Tensor db = bias ? Tensor::zeros({g.out_channels}, DType::F32, x.device()) : Tensor();
      ops.conv2d_backward_params_accum(step.precision, g, x.f32(), dy.f32(), dw.f32(), bias ? db.f32() : nullptr);
      if (want_w) grads[1] = dw;
      if (want_b) grads[2] = db;
    }
    ctx.clear();
    return grads;
  }

 private:
  Conv2dGeometry geometry(const Tensor& x, const Tensor& w) const {
    Conv2dGeometry g = window_;
    g.batch = x.dim(0);
    g.in_channels = x.dim(1);
    g.in_h = x.dim(2);
    g.in_w = x.dim(3);
    g.out_channels = w.dim(0);
    return g;
  }
  Conv2dGeometry window_;
};

}  // namespace

OpPtr make_general_conv_op(const Node& n, const OpInputs& in) {
  const Tensor &x = in.at(0), &w = in.at(1);
  const std::vector<int64_t> k = n.ints_attr("kernel_shape");
  if (!k.empty() && (k.size() != 2 || k[0] < 1 || k[1] < 1)) unsupported(n, "kernel_shape must have two positive sizes");
  const int64_t groups = n.int_attr("group", 1);
  if (w.ndim() != 4 || groups < 1 || x.dim(1) % groups != 0 || w.dim(0) % groups != 0 || w.dim(1) * groups != x.dim(1))
    unsupported(n, cat("group ", groups, " does not fit the channels (input ", shape_str(x.shape()), ", weight ",
                       shape_str(w.shape()), ")"));
  Conv2dGeometry g;
  g.kernel_h = k.empty() ? w.dim(2) : k[0];
  g.kernel_w = k.empty() ? w.dim(3) : k[1];
  if (w.dim(2) != g.kernel_h || w.dim(3) != g.kernel_w) unsupported(n, "weight shape does not match the kernel");
  read_window(n, /*pads_below_kernel=*/false, g);
  g.groups = groups;
  g.in_h = x.dim(2);
  g.in_w = x.dim(3);
  if (g.in_h + g.pad.top + g.pad.bottom < g.kernel_h || g.in_w + g.pad.left + g.pad.right < g.kernel_w)
    unsupported(n, cat("the kernel does not fit the input ", shape_str(x.shape())));
  return std::make_unique<ConvOp>(g);
}

}  // namespace pd::onnx
