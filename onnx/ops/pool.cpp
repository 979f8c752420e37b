// MaxPool and AveragePool where the core pools do not fit: ceil_mode
// (SqueezeNet), rectangular windows, per-side pads, count_include_pad=0.
// One Pool2dGeometry describes the node (output sizes and divisors follow
// PyTorch, whose exports these are), and the DeviceOps pooling entries of
// the input's device compute it.
#include "core/device_ops.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

class PoolOp : public Op {
 public:
  // window: kernel, strides, pads and modes; the sizes come from each call's input.
  PoolOp(std::string type, Pool2dGeometry window) : type_(std::move(type)), window_(window) {}
  std::string type() const override { return type_; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    const DeviceOps& ops = device_ops(x.device());
    const Pool2dGeometry g = geometry(x.shape());
    Tensor y = Tensor::empty({g.batch, g.channels, g.out_h(), g.out_w()}, DType::F32, x.device());
    // The argmax where the backend routes max pooling's gradient through
    // one, x and y where its backward reads those instead.
    Tensor argmax = kind() == PoolKind::Max && !ops.pool_backward_reads_tensors
                        ? Tensor::empty(y.shape(), DType::I32, x.device())
                        : Tensor();
    ops.pool2d_forward_indexed(kind(), g, x.f32(), y.f32(), argmax.defined() ? argmax.data<int32_t>() : nullptr);
    ctx.saved = {shape_tensor(x.shape()), argmax};
    if (ops.pool_backward_reads_tensors) ctx.saved.insert(ctx.saved.end(), {x, y});
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      const Tensor& dy = dys[0];
      const DeviceOps& ops = device_ops(dy.device());
      const Shape x_shape = shape_from_tensor(ctx.saved[0]);
      const Tensor& argmax = ctx.saved[1];
      const bool tensors = ctx.saved.size() > 2;
      Tensor dx = Tensor::empty(x_shape, DType::F32, dy.device());
      ops.pool2d_backward_indexed(kind(), geometry(x_shape), tensors ? ctx.saved[2].f32() : nullptr,
                                  tensors ? ctx.saved[3].f32() : nullptr,
                                  argmax.defined() ? argmax.data<int32_t>() : nullptr, dy.f32(), dx.f32());
      g[0] = dx;
    }
    ctx.clear();
    return g;
  }

 private:
  PoolKind kind() const { return type_ == "MaxPool" ? PoolKind::Max : PoolKind::Average; }
  Pool2dGeometry geometry(const Shape& nchw) const {
    Pool2dGeometry g = window_;
    g.batch = nchw[0];
    g.channels = nchw[1];
    g.in_h = nchw[2];
    g.in_w = nchw[3];
    return g;
  }
  std::string type_;
  Pool2dGeometry window_;
};

}  // namespace

OpPtr make_pool_op(const Node& n, const OpInputs& in) {
  const Tensor& x = in.at(0);
  if (x.ndim() != 4) unsupported(n, "only 2-d pooling (NCHW) is supported");
  const std::vector<int64_t> k = n.ints_attr("kernel_shape");
  if (k.size() != 2 || k[0] < 1 || k[1] < 1) unsupported(n, "kernel_shape must have two positive sizes");
  Pool2dGeometry g;
  g.kernel_h = k[0];
  g.kernel_w = k[1];
  read_window(n, /*pads_below_kernel=*/true, g);
  g.ceil_mode = n.int_attr("ceil_mode", 0) != 0;
  g.count_include_pad = n.int_attr("count_include_pad", 0) != 0;  // ONNX's default, unlike PyTorch's
  g.in_h = x.dim(2);
  g.in_w = x.dim(3);
  if (g.in_h + g.pad.top + g.pad.bottom < g.kernel_h || g.in_w + g.pad.left + g.pad.right < g.kernel_w)
    unsupported(n, cat("the window does not fit the input ", shape_str(x.shape())));
  return std::make_unique<PoolOp>(n.op_type, g);
}

}  // namespace pd::onnx
