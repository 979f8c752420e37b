// Elementwise functions of one tensor: the pieces of decomposed GELU (Erf,
// or Tanh and Pow) and LayerNorm (Pow, Sqrt), MobileNet's Clip (ReLU6),
// RMSNorm (Pow, Sqrt, Reciprocal), rotary embeddings (Sin, Cos, usually
// folded at import), Exp, and the no-ops Identity and float-to-float Cast.
#include <cmath>
#include <limits>

#include "onnx/ops/op_util.h"
#include "onnx/ops/ops.h"

namespace pd::onnx {

namespace {

enum class Fn { Erf, Tanh, Sqrt, Sigmoid, Neg, Pow, Clip, Identity, Sin, Cos, Exp, Reciprocal, HardSigmoid, HardSwish };

class UnaryOp : public Op {
 public:
  UnaryOp(std::string type, Fn f, float p0 = 0, float p1 = 0) : type_(std::move(type)), f_(f), p0_(p0), p1_(p1) {}
  std::string type() const override { return type_; }

  std::vector<Tensor> forward(std::span<const Tensor> in, const StepInfo&, LayerContext& ctx) const override {
    const Tensor& x = in[0];
    require_cpu_f32(x, type_.c_str());
    if (f_ == Fn::Identity) {
      ctx.saved.clear();
      return {x};
    }
    Tensor y = Tensor::empty(x.shape());
    const float* xp = x.f32();
    float* yp = y.f32();
    const int64_t n = x.numel();
    for (int64_t i = 0; i < n; ++i) yp[i] = apply(xp[i]);
    ctx.saved = {through_output() ? y : x};
    return {y};
  }

  std::vector<Tensor> backward(std::span<const Tensor> dys, const std::vector<bool>& need, const StepInfo&,
                               LayerContext& ctx) const override {
    std::vector<Tensor> g(need.size());
    if (need[0]) {
      const Tensor& dy = dys[0];
      if (f_ == Fn::Identity) {
        g[0] = dy;
      } else {
        const Tensor& s = ctx.saved[0];
        Tensor dx = Tensor::empty(dy.shape());
        const float *sp = s.f32(), *gp = dy.f32();
        float* dp = dx.f32();
        for (int64_t i = 0; i < dy.numel(); ++i) dp[i] = gp[i] * derivative(sp[i]);
        g[0] = dx;
      }
    }
    ctx.clear();
    return g;
  }

 private:
  float apply(float x) const {
    switch (f_) {
      case Fn::Erf: return std::erf(x);
      case Fn::Tanh: return std::tanh(x);
      case Fn::Sqrt: return std::sqrt(x);
      case Fn::Sigmoid: return 1.0f / (1.0f + std::exp(-x));
      case Fn::Neg: return -x;
      case Fn::Pow: return p0_ == 2.0f ? x * x : std::pow(x, p0_);
      case Fn::Clip: return std::min(std::max(x, p0_), p1_);
      case Fn::Identity: return x;
      case Fn::Sin: return std::sin(x);
      case Fn::Cos: return std::cos(x);
      case Fn::Exp: return std::exp(x);
      case Fn::Reciprocal: return 1.0f / x;
      case Fn::HardSigmoid: return std::min(1.0f, std::max(0.0f, p0_ * x + p1_));
      case Fn::HardSwish: return x * std::min(1.0f, std::max(0.0f, x / 6.0f + 0.5f));
    }
    return x;
  }
  // Tanh, Sqrt, Sigmoid, Exp and Reciprocal differentiate through their output; the rest through the input.
  bool through_output() const {
    return f_ == Fn::Tanh || f_ == Fn::Sqrt || f_ == Fn::Sigmoid || f_ == Fn::Exp || f_ == Fn::Reciprocal;
  }
  // d/dx given what forward saved (the input, or the output for Tanh, Sqrt, Sigmoid).
  float derivative(float s) const {
    switch (f_) {
      case Fn::Erf: return 1.1283791670955126f * std::exp(-s * s);  // 2/sqrt(pi) e^{-x^2}
      case Fn::Tanh: return 1.0f - s * s;
      case Fn::Sqrt: return 0.5f / s;
      case Fn::Sigmoid: return s * (1.0f - s);
      case Fn::Neg: return -1.0f;
      case Fn::Pow: return p0_ == 2.0f ? 2.0f * s : p0_ * std::pow(s, p0_ - 1.0f);
      case Fn::Clip: return s > p0_ && s < p1_ ? 1.0f : 0.0f;  // as PyTorch's ReLU6 (hardtanh): 0 at the bounds
      case Fn::Identity: return 1.0f;
      case Fn::Sin: return std::cos(s);
      case Fn::Cos: return -std::sin(s);
      case Fn::Exp: return s;
      case Fn::Reciprocal: return -s * s;
      // PyTorch's: the slope inside (-3, 3) only, for HardSwish 0 below -3, 1 above 3.
      case Fn::HardSigmoid: return p0_ * s + p1_ > 0.0f && p0_ * s + p1_ < 1.0f ? p0_ : 0.0f;
      case Fn::HardSwish: return s < -3.0f ? 0.0f : s <= 3.0f ? s / 3.0f + 0.5f : 1.0f;
    }
    return 1.0f;
  }
  std::string type_;
  Fn f_;
  float p0_, p1_;
};

}  // namespace

OpPtr make_unary_op(const Node& n, const OpInputs& in) {
  const std::string& t = n.op_type;
  if (in.at(0).dtype() != DType::F32) unsupported(n, "expects a float input");
  if (t == "Erf") return std::make_unique<UnaryOp>(t, Fn::Erf);
  if (t == "Tanh") return std::make_unique<UnaryOp>(t, Fn::Tanh);
  if (t == "Sqrt") return std::make_unique<UnaryOp>(t, Fn::Sqrt);
  if (t == "Sigmoid") return std::make_unique<UnaryOp>(t, Fn::Sigmoid);
  if (t == "Neg") return std::make_unique<UnaryOp>(t, Fn::Neg);
  if (t == "Identity") return std::make_unique<UnaryOp>(t, Fn::Identity);
  if (t == "Sin") return std::make_unique<UnaryOp>(t, Fn::Sin);
  if (t == "Cos") return std::make_unique<UnaryOp>(t, Fn::Cos);
  if (t == "Exp") return std::make_unique<UnaryOp>(t, Fn::Exp);
  if (t == "Reciprocal") return std::make_unique<UnaryOp>(t, Fn::Reciprocal);
  if (t == "HardSwish") return std::make_unique<UnaryOp>(t, Fn::HardSwish);
  if (t == "HardSigmoid")
    return std::make_unique<UnaryOp>(t, Fn::HardSigmoid, n.float_attr("alpha", 0.2f), n.float_attr("beta", 0.5f));
  if (t == "Cast") {
    if (n.int_attr("to", 0) != kFloat) unsupported(n, "only casts to float are supported on run-time tensors");
    return std::make_unique<UnaryOp>(t, Fn::Identity);
  }
  if (t == "Pow") return std::make_unique<UnaryOp>(t, Fn::Pow, const_scalar(n, in, 1));
  if (t == "Clip") {
    const float inf = std::numeric_limits<float>::infinity();
    float lo = -inf, hi = inf;
    if (in.example.size() > 1 && in.example[1].defined()) lo = const_scalar(n, in, 1);
    if (in.example.size() > 2 && in.example[2].defined()) hi = const_scalar(n, in, 2);
    return std::make_unique<UnaryOp>(t, Fn::Clip, lo, hi);
  }
  PD_CHECK(false, "not a unary op: ", t);
}

}  // namespace pd::onnx
