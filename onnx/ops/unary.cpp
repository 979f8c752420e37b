// Elementwise functions of one tensor: the pieces of decomposed GELU (Erf,
// or Tanh and Pow) and LayerNorm (Pow, Sqrt), MobileNet's Clip (ReLU6),
// RMSNorm (Pow, Sqrt, Reciprocal), rotary embeddings (Sin, Cos, usually
// folded at import), Exp, and the no-ops Identity and float-to-float Cast.
#include <limits>
#include <optional>

#include "core/device_ops.h"
#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

// f through the DeviceOps unary entries; nullopt: Identity (and
// float-to-float Cast), which passes its input and gradient through.
class UnaryOp : public Op {
 public:
  UnaryOp(std::string type, std::optional<UnaryParams> f) : type_(std::move(type)), f_(f) {}
  std::string type() const override { return type_; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    if (!f_) {
      ctx.saved.clear();
      return {x};
    }
    Tensor y = Tensor::empty(x.shape(), DType::F32, x.device());
    device_ops(x.device()).unary_forward(*f_, x.numel(), x.f32(), y.f32());
    ctx.saved = {unary_backward_reads_output(f_->fn) ? y : x};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      const Tensor& dy = dys[0];
      if (!f_) {
        g[0] = dy;
      } else {
        const Tensor& s = ctx.saved[0];
        Tensor dx = Tensor::empty(dy.shape(), DType::F32, dy.device());
        device_ops(dy.device()).unary_backward(*f_, dy.numel(), s.f32(), dy.f32(), dx.f32());
        g[0] = dx;
      }
    }
    ctx.clear();
    return g;
  }

 private:
  std::string type_;
  std::optional<UnaryParams> f_;
};

OpPtr unary(const std::string& type, UnaryFn f, float p0 = 0.0f, float p1 = 0.0f) {
  return std::make_unique<UnaryOp>(type, UnaryParams{f, p0, p1});
}

}  // namespace

OpPtr make_unary_op(const Node& n, const OpInputs& in) {
  const std::string& t = n.op_type;
  if (in.at(0).dtype() != DType::F32) unsupported(n, "expects a float input");
  if (t == "Erf") return unary(t, UnaryFn::Erf);
  if (t == "Tanh") return unary(t, UnaryFn::Tanh);
  if (t == "Sqrt") return unary(t, UnaryFn::Sqrt);
  if (t == "Sigmoid") return unary(t, UnaryFn::Sigmoid);
  if (t == "Neg") return unary(t, UnaryFn::Neg);
  if (t == "Identity") return std::make_unique<UnaryOp>(t, std::nullopt);
  if (t == "Sin") return unary(t, UnaryFn::Sin);
  if (t == "Cos") return unary(t, UnaryFn::Cos);
  if (t == "Exp") return unary(t, UnaryFn::Exp);
  if (t == "Reciprocal") return unary(t, UnaryFn::Reciprocal);
  if (t == "HardSwish") return unary(t, UnaryFn::HardSwish);
  if (t == "HardSigmoid")
    return unary(t, UnaryFn::HardSigmoid, n.float_attr("alpha", 0.2f), n.float_attr("beta", 0.5f));
  if (t == "Cast") {
    if (n.int_attr("to", 0) != kFloat) unsupported(n, "only casts to float are supported on run-time tensors");
    return std::make_unique<UnaryOp>(t, std::nullopt);
  }
  if (t == "Pow") return unary(t, UnaryFn::Pow, const_scalar(n, in, 1));
  if (t == "Clip") {
    const float inf = std::numeric_limits<float>::infinity();
    float lo = -inf, hi = inf;
    if (in.example.size() > 1 && in.example[1].defined()) lo = const_scalar(n, in, 1);
    if (in.example.size() > 2 && in.example[2].defined()) hi = const_scalar(n, in, 2);
    return unary(t, UnaryFn::Clip, lo, hi);
  }
  PD_CHECK(false, "not a unary op: ", t);
}

}  // namespace pd::onnx
