#include <array>

#include "core/bf16_rounding.h"
#include "core/device_ops.h"
#include "core/layers.h"
#include "core/layers/sequence_parts.h"

namespace pd {

namespace {

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = Tensor::empty(a.shape(), DType::F32, a.device());
  device_ops(a.device()).add(a.numel(), a.f32(), b.f32(), y.f32());
  return y;
}

// Pre-LN GPT block: x1 = x + drop(attn(ln1(x))); y = x1 + drop(fc2(gelu(fc1(ln2(x1))))).
// Sub-layers keep their own parameters (prefixed names) and contexts
// (ctx.children[part]). Dropout, when p > 0, is applied to both residual
// branches (substreams 1 and 2 of the block's key), not to attention
// probabilities. The backward splits like its parts: the B pass runs every
// part's backward_input, the W pass every part's backward_weights. Init: the MLP uses GPT-2's N(0, 0.02); each part draws
// from its own stream, keyed by the block's rng and the part index.
class TransformerBlock : public SplitBackwardLayer {
  enum Part { kLn1, kAttn, kDrop1, kLn2, kFc1, kGelu, kFc2, kDrop2, kParts };
  struct Slot {
    std::string prefix;
    LayerPtr layer;
    size_t first_param = 0, num_params = 0;
  };

 public:
  TransformerBlock(int64_t dim, int64_t heads, float dropout) : dim_(dim), heads_(heads), p_(dropout) {
    if (dim < 1) throw UserError(cat("transformer block: dim must be positive, got ", dim));
    slots_[kLn1] = {"ln1.", make_layernorm(dim)};
    slots_[kAttn] = {"attn.", make_causal_self_attention(dim, heads)};
    slots_[kDrop1] = {"drop1.", make_dropout(dropout, 1)};
    slots_[kLn2] = {"ln2.", make_layernorm(dim)};
    slots_[kFc1] = {"mlp.fc1.", make_linear(dim, 4 * dim, true, LinearInit::GptNormal)};
    slots_[kGelu] = {"mlp.gelu.", make_gelu()};
    slots_[kFc2] = {"mlp.fc2.", make_linear(4 * dim, dim, true, LinearInit::GptNormal)};
    slots_[kDrop2] = {"drop2.", make_dropout(dropout, 2)};
    size_t next = 0;
    for (Slot& s : slots_) {
      s.first_param = next;
      s.num_params = s.layer->param_specs().size();
      next += s.num_params;
    }
  }
  std::string type() const override { return "transformer_block"; }
  std::string describe() const override {
    return cat("transformer_block(dim ", dim_, ", heads ", heads_, p_ > 0 ? cat(", dropout ", p_) : "", ")");
  }
  std::vector<ParamSpec> param_specs() const override {
    std::vector<ParamSpec> out;
    for (const Slot& s : slots_)
      for (ParamSpec p : s.layer->param_specs()) out.push_back({s.prefix + p.name, p.shape});
    return out;
  }
  void init(std::span<Tensor> params, std::span<Tensor> buffers, const CounterRng& rng) const override {
    for (size_t k = 0; k < slots_.size(); ++k) {
      CounterRng part(rng.seed ^ (0x9E3779B97F4A7C15ull * (k + 1)), rng.a, rng.b);
      slots_[k].layer->init(params.subspan(slots_[k].first_param, slots_[k].num_params), buffers, part);
    }
  }
  Shape output_shape(const Shape& in) const override { return slots_[kAttn].layer->output_shape(in); }

  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    ctx.saved.clear();
    ctx.children.assign(kParts, LayerContext{});
    auto run = [&](Part p, const Tensor& in) {
      const Slot& s = slots_[p];
      Tensor out = s.layer->forward({a.params.subspan(s.first_param, s.num_params), {}, a.step}, in,
                                    ctx.children[p]);
      round_in_place_if_bf16(a.step.precision, out);  // bf16: every part's output
      return out;
    };
    Tensor x1 = add(x, run(kDrop1, run(kAttn, run(kLn1, x))));
    Tensor m = run(kDrop2, run(kFc2, run(kGelu, run(kFc1, run(kLn2, x1)))));
    return add(x1, m);
  }
  // Each part keeps in its own context what its weight gradient needs.
  Tensor backward_input(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.children.size() == kParts, describe(), ": backward without forward");
    auto back = [&](Part p, const Tensor& g, bool need_input_grad = true) {
      Tensor dx = slots_[p].layer->backward_input(part_args(a, p, need_input_grad), g, ctx.children[p]);
      round_in_place_if_bf16(a.step.precision, dx);  // bf16: every part's input gradient
      return dx;
    };
    Tensor dx1 = add(dy, back(kLn2, back(kFc1, back(kGelu, back(kFc2, back(kDrop2, dy))))));
    Tensor dln1 = back(kLn1, back(kAttn, back(kDrop1, dx1)), a.need_input_grad);
    return a.need_input_grad ? add(dx1, dln1) : Tensor();
  }
  void backward_weights(const BackwardArgs& a, LayerContext& ctx) const override {
    PD_CHECK(ctx.children.size() == kParts, describe(), ": weight backward without its input backward");
    for (size_t p = kParts; p-- > 0;)
      slots_[p].layer->backward_weights(part_args(a, static_cast<Part>(p), false), ctx.children[p]);
    ctx.clear();
  }

 private:
  BackwardArgs part_args(const BackwardArgs& a, Part p, bool need_input_grad) const {
    const Slot& s = slots_[p];
    return {a.params.subspan(s.first_param, s.num_params), a.grads.subspan(s.first_param, s.num_params), a.step,
            need_input_grad};
  }

  int64_t dim_, heads_;
  float p_;
  std::array<Slot, kParts> slots_;
};

}  // namespace

LayerPtr make_transformer_block(int64_t dim, int64_t heads, float dropout) {
  return std::make_unique<TransformerBlock>(dim, heads, dropout);
}

}  // namespace pd
