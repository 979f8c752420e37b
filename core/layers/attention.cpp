#include "core/cpu/attention_kernels.h"
#include "core/cpu/linear_kernels.h"
#include "core/layers.h"
#include "core/layers/sequence_parts.h"

namespace pd {

namespace {

// Init: GPT-2 style, weights N(0, 0.02) (proj drawing after qkv), biases 0.
class CausalSelfAttention : public Layer {
 public:
  CausalSelfAttention(int64_t dim, int64_t heads) : dim_(dim), heads_(heads) {
    if (dim < 1 || heads < 1 || dim % heads != 0)
      throw UserError(cat("attention: dim (", dim, ") must be a positive multiple of heads (", heads, ")"));
  }
  std::string type() const override { return "attention"; }
  std::string describe() const override { return cat("attention(dim ", dim_, ", heads ", heads_, ")"); }
  std::vector<ParamSpec> param_specs() const override {
    return {{"qkv.weight", {3 * dim_, dim_}}, {"qkv.bias", {3 * dim_}},
            {"proj.weight", {dim_, dim_}}, {"proj.bias", {dim_}}};
  }
  void init(std::span<Tensor> params, std::span<Tensor>, const CounterRng& rng) const override {
    fill_normal(params[0], rng, 0, 0.02f);
    params[1].zero();
    fill_normal(params[2], rng, static_cast<uint64_t>(params[0].numel()), 0.02f);
    params[3].zero();
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 2 || in[1] != dim_)
      throw UserError(cat(describe(), ": input must be [T, ", dim_, "], got ", shape_str(in)));
    return in;
  }

  // Saves x, qkv, the softmax probabilities and the pre-projection output.
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    cpu::AttentionShape s = shape_of(x);
    int64_t rows = s.batch * s.seq;
    Tensor qkv = Tensor::empty({s.batch, s.seq, 3 * dim_});
    cpu::linear_forward(x.f32(), a.params[0].f32(), a.params[1].f32(), qkv.f32(), rows, dim_, 3 * dim_);
    Tensor probs = Tensor::empty({s.batch, heads_, s.seq, s.seq});
    Tensor att = Tensor::empty({s.batch, s.seq, dim_});
    cpu::attention_forward(s, qkv.f32(), probs.f32(), att.f32());
    Tensor y = Tensor::empty({s.batch, s.seq, dim_});
    cpu::linear_forward(att.f32(), a.params[2].f32(), a.params[3].f32(), y.f32(), rows, dim_, dim_);
    ctx.saved = {x, qkv, probs, att};
    return y;
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    const Tensor& x = ctx.saved.at(0);
    cpu::AttentionShape s = shape_of(x);
    int64_t rows = s.batch * s.seq;
    Tensor datt = Tensor::empty({s.batch, s.seq, dim_});
    cpu::linear_backward(ctx.saved[3].f32(), a.params[2].f32(), dy.f32(), datt.f32(), a.grads[2].f32(),
                         a.grads[3].f32(), rows, dim_, dim_);
    Tensor dqkv = Tensor::empty({s.batch, s.seq, 3 * dim_});
    cpu::attention_backward(s, ctx.saved[1].f32(), ctx.saved[2].f32(), datt.f32(), dqkv.f32());
    Tensor dx = a.need_input_grad ? Tensor::empty(x.shape()) : Tensor();
    cpu::linear_backward(x.f32(), a.params[0].f32(), dqkv.f32(), dx.defined() ? dx.f32() : nullptr,
                         a.grads[0].f32(), a.grads[1].f32(), rows, dim_, 3 * dim_);
    ctx.clear();
    return dx;
  }

 private:
  cpu::AttentionShape shape_of(const Tensor& x) const {
    PD_CHECK(x.ndim() == 3 && x.dim(2) == dim_, describe(), " expects [batch, T, ", dim_, "], got ",
             shape_str(x.shape()));
    return {x.dim(0), x.dim(1), heads_, dim_ / heads_};
  }
  int64_t dim_, heads_;
};

}  // namespace

LayerPtr make_causal_self_attention(int64_t dim, int64_t heads) {
  return std::make_unique<CausalSelfAttention>(dim, heads);
}

}  // namespace pd
