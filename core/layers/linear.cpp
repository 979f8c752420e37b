#include <cmath>

#include "core/bf16_rounding.h"
#include "core/device_ops.h"
#include "core/layers.h"
#include "core/layers/sequence_parts.h"

namespace pd {

// Parameters are drawn on the host, so every device gets the same values,
// and copied to where they live.
template <class Fill>
void fill_on_host(Tensor& t, Fill fill) {
  if (t.device().is_cpu()) return fill(t.f32());
  Tensor h = Tensor::empty(t.shape());
  fill(h.f32());
  t.copy_from(h);
}

void fill_normal(Tensor& t, const CounterRng& rng, uint64_t offset, float std) {
  fill_on_host(t, [&](float* p) {
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = std * rng.normal(offset + static_cast<uint64_t>(i));
  });
}

void fill_uniform(Tensor& t, const CounterRng& rng, uint64_t offset, float bound) {
  fill_on_host(t, [&](float* p) {
    for (int64_t i = 0; i < t.numel(); ++i)
      p[i] = bound * (2.0f * rng.uniform(offset + static_cast<uint64_t>(i)) - 1.0f);
  });
}
namespace {

class Linear : public SplitBackwardLayer {
 public:
  Linear(int64_t in, int64_t out, bool bias, LinearInit init)
      : in_(in), out_(out), bias_(bias), init_(init) {
    if (in < 1 || out < 1)
      throw UserError(cat("linear: in_features and out_features must be positive, got ", in, " and ", out));
  }
  std::string type() const override { return "linear"; }
  std::string describe() const override {
    return cat("linear(", in_, "->", out_, bias_ ? "" : ", no bias", ")");
  }
  std::vector<ParamSpec> param_specs() const override {
    std::vector<ParamSpec> s{{"weight", {out_, in_}}};
    if (bias_) s.push_back({"bias", {out_}});
    return s;
  }
  void init(std::span<Tensor> params, std::span<Tensor>, const CounterRng& rng) const override {
    if (init_ == LinearInit::Uniform) {
      float bound = 1.0f / std::sqrt(static_cast<float>(in_));
      fill_uniform(params[0], rng, 0, bound);
      if (bias_) fill_uniform(params[1], rng, static_cast<uint64_t>(params[0].numel()), bound);
    } else {
      fill_normal(params[0], rng, 0, 0.02f);
      if (bias_) params[1].zero();
    }
  }
  Shape output_shape(const Shape& in) const override {
    if (in.empty() || in.back() != in_)
      throw UserError(cat(describe(), ": input ", shape_str(in), " must end in ", in_, " features"));
    Shape out = in;
    out.back() = out_;
    return out;
  }
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    const int64_t rows = rows_over_last_dim(x, in_, "linear");
    Shape ys = x.shape();
    ys.back() = out_;
    if (logits_in_bf16(a.step, x)) return forward_to_loss_bf16(a, x, rows, ys, ctx);
    Tensor y = Tensor::empty(ys, DType::F32, x.device());
    if (rows > 0)
      device_ops(x.device()).linear_forward(a.step.precision, rows, in_, out_, x.f32(), a.params[0].f32(),
                                            bias_ ? a.params[1].f32() : nullptr, y.f32());
    ctx.saved = {x};
    return y;
  }
  // dx = dy W; keeps dy for backward_weights (ctx.saved = {x, dy}).
  Tensor backward_input(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 1, describe(), ": backward without forward");
    const Tensor& x = ctx.saved[0];
    const int64_t rows = rows_over_last_dim(x, in_, "linear");
    if (x.dtype() == DType::BF16) return backward_input_bf16(a, dy, rows, ctx);
    Tensor dx;
    if (a.need_input_grad) {
      dx = Tensor::empty(x.shape(), DType::F32, x.device());
      if (rows > 0)
        device_ops(x.device())
            .linear_backward_input(a.step.precision, rows, in_, out_, dy.f32(), a.params[0].f32(), dx.f32());
    }
    ctx.saved.push_back(dy);
    return dx;
  }
  // dW += dyᵀ x, db += column sums of dy.
  void backward_weights(const BackwardArgs& a, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 2, describe(), ": weight backward without its input backward");
    const Tensor& x = ctx.saved[0];
    const int64_t rows = rows_over_last_dim(x, in_, "linear");
    if (rows > 0 && x.dtype() == DType::BF16)
      device_ops(x.device()).linear_backward_params_accum_bf16(rows, in_, out_, x.bf16(), ctx.saved[1].bf16(),
                                                               a.grads[0].f32(), bias_ ? a.grads[1].f32() : nullptr);
    else if (rows > 0)
      device_ops(x.device())
          .linear_backward_params_accum(a.step.precision, rows, in_, out_, x.f32(), ctx.saved[1].f32(),
                                        a.grads[0].f32(), bias_ ? a.grads[1].f32() : nullptr);
    ctx.clear();
  }

 private:
  // The model's last layer under bf16 storage hands the loss bf16 logits
  // (half the bytes of the largest activation of a language model's head)
  // and keeps its input as bf16; x holds bf16 values (the range rounds
  // every layer's output).
  static bool logits_in_bf16(const StepInfo& step, const Tensor& x) {
    if (!step.output_to_loss || step.precision != Precision::BF16 || x.dtype() != DType::F32) return false;
    const DeviceOps& o = device_ops(x.device());
    return uses_bf16_storage(o) && o.pack_bf16 && o.linear_forward_bf16 && o.linear_backward_input_bf16 &&
           o.linear_backward_params_accum_bf16 && o.softmax_cross_entropy_bf16;
  }
  Tensor forward_to_loss_bf16(const ForwardArgs& a, const Tensor& x, int64_t rows, const Shape& ys,
                              LayerContext& ctx) const {
    Tensor x16 = packed_bf16(x);
    Tensor y = Tensor::empty(ys, DType::BF16, x.device());
    if (rows > 0)
      device_ops(x.device()).linear_forward_bf16(rows, in_, out_, x16.bf16(), a.params[0].f32(),
                                                 bias_ ? a.params[1].f32() : nullptr, nullptr, y.bf16());
    ctx.saved = {x16};
    return y;
  }
  // dy: the loss's bf16 gradient (or FP32 holding bf16 values); dx FP32
  // holding bf16 values. ctx.saved becomes {x, dy} with dy bf16.
  Tensor backward_input_bf16(const BackwardArgs& a, const Tensor& dy, int64_t rows, LayerContext& ctx) const {
    const Tensor& x = ctx.saved[0];
    Tensor dy16 = dy.dtype() == DType::BF16 ? dy : packed_bf16(dy);
    Tensor dx;
    if (a.need_input_grad) {
      dx = Tensor::empty(x.shape(), DType::F32, x.device());
      if (rows > 0)
        device_ops(x.device()).linear_backward_input_bf16(rows, in_, out_, dy16.bf16(), a.params[0].f32(), dx.f32(),
                                                          nullptr);
    }
    ctx.saved.push_back(dy16);
    return dx;
  }

  int64_t in_, out_;
  bool bias_;
  LinearInit init_;
};

}  // namespace

LayerPtr make_linear(int64_t in, int64_t out, bool bias, LinearInit init) {
  return std::make_unique<Linear>(in, out, bias, init);
}

LayerPtr make_linear(int64_t in_features, int64_t out_features, bool bias) {
  return make_linear(in_features, out_features, bias, LinearInit::Uniform);
}

}  // namespace pd
