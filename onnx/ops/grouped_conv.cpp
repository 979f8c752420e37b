// Grouped convolution (MobileNet's depthwise layers, ResNeXt): the core
// conv2d has no groups, so each group's channels are gathered into a
// contiguous tensor and run through the core's im2col kernels
// (cpu::conv2d_forward / conv2d_backward). A group's weights are already
// contiguous: W is [O, C/groups, k, k] with group g owning rows g*O/groups...
#include <algorithm>

#include "core/cpu/conv_kernels.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

// Channels [first, first + count) of an NCHW tensor, copied out / in.
void copy_channels(const float* src, int64_t n, int64_t channels, int64_t plane, int64_t first, int64_t count, float* dst) {
  for (int64_t i = 0; i < n; ++i)
    std::copy(src + (i * channels + first) * plane, src + (i * channels + first + count) * plane, dst + i * count * plane);
}
void put_channels(const float* src, int64_t n, int64_t channels, int64_t plane, int64_t first, int64_t count, float* dst) {
  for (int64_t i = 0; i < n; ++i)
    std::copy(src + i * count * plane, src + (i + 1) * count * plane, dst + (i * channels + first) * plane);
}

class GroupedConvOp : public Op {
 public:
  GroupedConvOp(int64_t groups, int kernel, int stride, int padding) : groups_(groups), k_(kernel), s_(stride), p_(padding) {}
  std::string type() const override { return "Conv"; }

  Conv2dGeometry group_shape(const Tensor& x, const Tensor& w) const {
    Conv2dGeometry s;
    s.batch = x.dim(0);
    s.in_channels = x.dim(1) / groups_;
    s.in_h = x.dim(2);
    s.in_w = x.dim(3);
    s.out_channels = w.dim(0) / groups_;
    s.kernel_h = s.kernel_w = k_;
    s.stride = s_;
    s.padding = p_;
    return s;
  }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &x = in[0], &w = in[1];
    require_cpu_f32(x, "Conv");
    const bool bias = in.size() > 2 && in[2].defined();
    const Conv2dGeometry s = group_shape(x, w);
    const int64_t N = s.batch, C = x.dim(1), O = w.dim(0), P = s.out_h() * s.out_w();
    Tensor y = Tensor::empty({N, O, s.out_h(), s.out_w()});
    Tensor xg = Tensor::empty({N, s.in_channels, s.in_h, s.in_w}), yg = Tensor::empty({N, s.out_channels, s.out_h(), s.out_w()});
    for (int64_t g = 0; g < groups_; ++g) {
      copy_channels(x.f32(), N, C, s.in_h * s.in_w, g * s.in_channels, s.in_channels, xg.f32());
      cpu::conv2d_forward(s, xg.f32(), w.f32() + g * s.out_channels * s.patch(), bias ? in[2].f32() + g * s.out_channels : nullptr,
                          yg.f32());
      put_channels(yg.f32(), N, O, P, g * s.out_channels, s.out_channels, y.f32());
    }
    ctx.saved = {x, w};
    if (bias) ctx.saved.push_back(in[2]);
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    const Tensor &x = ctx.saved[0], &w = ctx.saved[1], &dy = dys[0];
    const bool bias = ctx.saved.size() > 2;
    const Conv2dGeometry s = group_shape(x, w);
    const int64_t N = s.batch, C = x.dim(1), O = w.dim(0), P = s.out_h() * s.out_w();
    std::vector<Tensor> g(need.size());
    Tensor dx = need[0] ? Tensor::empty(x.shape()) : Tensor();
    Tensor dw = Tensor::zeros(w.shape()), db = bias ? Tensor::zeros({O}) : Tensor();
    Tensor xg = Tensor::empty({N, s.in_channels, s.in_h, s.in_w}), dyg = Tensor::empty({N, s.out_channels, s.out_h(), s.out_w()});
    Tensor dxg = need[0] ? Tensor::empty(xg.shape()) : Tensor();
    for (int64_t k = 0; k < groups_; ++k) {
      copy_channels(x.f32(), N, C, s.in_h * s.in_w, k * s.in_channels, s.in_channels, xg.f32());
      copy_channels(dy.f32(), N, O, P, k * s.out_channels, s.out_channels, dyg.f32());
      cpu::conv2d_backward(s, xg.f32(), w.f32() + k * s.out_channels * s.patch(), dyg.f32(),
                           need[0] ? dxg.f32() : nullptr, dw.f32() + k * s.out_channels * s.patch(),
                           bias ? db.f32() + k * s.out_channels : nullptr);
      if (need[0]) put_channels(dxg.f32(), N, C, s.in_h * s.in_w, k * s.in_channels, s.in_channels, dx.f32());
    }
    g[0] = dx;
    if (need.size() > 1 && need[1]) g[1] = dw;
    if (bias && need.size() > 2 && need[2]) g[2] = db;
    ctx.clear();
    return g;
  }

 private:
  int64_t groups_;
  int k_, s_, p_;
};

}  // namespace

OpPtr make_grouped_conv_op(const Node& n, const OpInputs& in, int kernel, int stride, int padding) {
  const Tensor &x = in.at(0), &w = in.at(1);
  const int64_t groups = n.int_attr("group", 1);
  if (groups < 1 || x.dim(1) % groups != 0 || w.dim(0) % groups != 0 || w.dim(1) * groups != x.dim(1))
    unsupported(n, cat("group ", groups, " does not divide the channels (input ", x.dim(1), ", weight ", shape_str(w.shape()), ")"));
  return std::make_unique<GroupedConvOp>(groups, kernel, stride, padding);
}

}  // namespace pd::onnx
