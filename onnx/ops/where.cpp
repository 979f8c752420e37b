// Where(cond, X, Y): the causal mask of attention (cond a constant, one
// branch a constant -inf). Gradients go to X where cond holds, else to Y.
// The condition is read at import, one byte per element, and copied once
// to the device the activations run on.
#include <mutex>

#include "core/device_ops.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

class WhereOp : public Op {
 public:
  // cond_bytes: one byte per element of cond_shape, packed into an I32 tensor on the host.
  WhereOp(Tensor cond_bytes, Shape cond_shape) : cond_host_(std::move(cond_bytes)), cond_shape_(std::move(cond_shape)) {}
  std::string type() const override { return "Where"; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor &x = in[1], &y = in[2];
    PD_CHECK(x.device() == y.device(), "Where: X on ", x.device().str(), ", Y on ", y.device().str());
    const Shape out = broadcast_shapes_rt(broadcast_shapes_rt(cond_shape_, x.shape()), y.shape());
    const Tensor cond = cond_on(x.device());
    const auto sc = broadcast_strides(cond_shape_, out), sx = broadcast_strides(x.shape(), out),
               sy = broadcast_strides(y.shape(), out);
    Tensor r = Tensor::empty(out, DType::F32, x.device());
    device_ops(x.device()).where_forward(static_cast<int>(out.size()), out.data(), sc.data(), sx.data(), sy.data(),
                                         bytes(cond), x.f32(), y.f32(), r.f32());
    ctx.saved = {cond, shape_tensor(x.shape()), shape_tensor(y.shape())};
    return {r};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    const Tensor& dy = dys[0];
    const Shape& out = dy.shape();
    const auto sc = broadcast_strides(cond_shape_, out);
    Tensor full[2];
    for (int side = 0; side < 2; ++side)
      if (need[size_t(side) + 1]) full[side] = Tensor::empty(out, DType::F32, dy.device());
    device_ops(dy.device()).where_backward(static_cast<int>(out.size()), out.data(), sc.data(), bytes(ctx.saved[0]),
                                           dy.f32(), full[0].defined() ? full[0].f32() : nullptr,
                                           full[1].defined() ? full[1].f32() : nullptr);
    std::vector<Tensor> g(3);
    for (int side = 0; side < 2; ++side)
      if (full[side].defined()) g[size_t(side) + 1] = reduce_to(full[side], shape_from_tensor(ctx.saved[size_t(side) + 1]));
    ctx.clear();
    return g;
  }

 private:
  // The condition on device d, copied there once.
  Tensor cond_on(Device d) const {
    std::lock_guard<std::mutex> lock(mu_);
    if (!cond_cached_.defined() || !(cond_cached_.device() == d)) cond_cached_ = cond_host_.to(d);
    return cond_cached_;
  }
  static const uint8_t* bytes(const Tensor& t) { return reinterpret_cast<const uint8_t*>(t.data<int32_t>()); }

  Tensor cond_host_;
  Shape cond_shape_;
  mutable std::mutex mu_;
  mutable Tensor cond_cached_;
};

// One byte per element (nonzero: true), packed into an I32 tensor.
Tensor condition_bytes(const Tensor& c) {
  const int64_t n = c.numel();
  Tensor m = Tensor::zeros({(n + 3) / 4}, DType::I32);
  uint8_t* mp = reinterpret_cast<uint8_t*>(m.data<int32_t>());
  for (int64_t i = 0; i < n; ++i)
    mp[i] = c.dtype() == DType::I64   ? c.data<int64_t>()[i] != 0
            : c.dtype() == DType::I32 ? c.data<int32_t>()[i] != 0
                                      : c.f32()[i] != 0.0f;
  return m;
}

}  // namespace

OpPtr make_where_op(const Node& n, const OpInputs& in) {
  check_strided_rank(n, broadcast_shapes(n, broadcast_shapes(n, in.at(0).shape(), in.at(1).shape()), in.at(2).shape()));
  if (in.at(1).dtype() != DType::F32 || in.at(2).dtype() != DType::F32) unsupported(n, "X and Y must be float");
  if (!in.constant[0]) unsupported(n, "the condition must be a constant known at import (a fixed mask)");
  const Tensor& c = in.at(0);
  return std::make_unique<WhereOp>(condition_bytes(c.to(Device::cpu())), c.shape());
}

}  // namespace pd::onnx
