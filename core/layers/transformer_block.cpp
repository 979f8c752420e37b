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
// from its own stream, keyed by the block's rng and the part index. ln1,
// ln2 (with their residual adds) and fc1 + GELU run on the fused DeviceOps
// entries (core/README.md), their parts kept for parameters and init.
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

  // The sub-layers run attention, the dropouts and fc2; the block runs
  // ln1, ln2 (each joined with its residual add) and fc1 + GELU itself on
  // the fused entries, which round their outputs under BF16 (device_ops.h),
  // with the values of the parts' sequence.
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    ctx.saved.clear();
    ctx.children.assign(kParts, LayerContext{});
    auto run = [&](Part p, const Tensor& in) {
      const Slot& s = slots_[p];
      Tensor out = s.layer->forward({a.params.subspan(s.first_param, s.num_params), {}, a.step}, in,
                                    ctx.children[p]);
      // bf16: every part's output; a part that hands back its input (dropout
      // at p = 0, or in eval) hands back bf16 values already.
      if (!out.same_storage(in)) round_in_place_if_bf16(a.step.precision, out);
      return out;
    };
    Tensor x1 = Tensor::empty(x.shape(), DType::F32, x.device());
    if (keeps_bf16(device_ops(x.device()), a.step.precision)) {
      // Attention's output comes back rounded already: no run() around it.
      Tensor h1 = add_layernorm(a, kLn1, x, Tensor(), nullptr, DType::BF16, ctx.children[kLn1]);
      const Slot& at = slots_[kAttn];
      Tensor o = at.layer->forward({a.params.subspan(at.first_param, at.num_params), {}, a.step}, h1,
                                   ctx.children[kAttn]);
      Tensor h2 = add_layernorm(a, kLn2, x, run(kDrop1, o), &x1, DType::BF16, ctx.children[kLn2]);
      Tensor g = linear_gelu_bf16(a, h2, ctx.children[kFc1]);
      return add(x1, run(kDrop2, fc2_forward_bf16(a, g, ctx.children[kFc2])));
    }
    Tensor h1 = add_layernorm(a, kLn1, x, Tensor(), nullptr, DType::F32, ctx.children[kLn1]);
    Tensor h2 = add_layernorm(a, kLn2, x, run(kDrop1, run(kAttn, h1)), &x1, DType::F32, ctx.children[kLn2]);
    Tensor m = run(kDrop2, run(kFc2, linear_gelu(a, h2, ctx.children[kFc1])));
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
    if (saved_bf16(ctx.children[kFc1], 0)) {  // bf16 storage; attention's input gradient is bf16 too
      Tensor dg = fc2_backward_input_bf16(a, packed_bf16(back(kDrop2, dy)), ctx.children[kFc2]);
      Tensor dh2 = linear_gelu_backward_input_bf16(a, dg, ctx.children[kFc1]);
      Tensor dx1 = layernorm_backward_input_add(a, kLn2, dh2, dy, true, ctx.children[kLn2]);
      return layernorm_backward_input_add(a, kLn1, back(kAttn, back(kDrop1, dx1)), dx1, a.need_input_grad,
                                          ctx.children[kLn1]);
    }
    Tensor dh2 = linear_gelu_backward_input(a, back(kFc2, back(kDrop2, dy)), ctx.children[kFc1]);
    Tensor dx1 = layernorm_backward_input_add(a, kLn2, dh2, dy, true, ctx.children[kLn2]);
    return layernorm_backward_input_add(a, kLn1, back(kAttn, back(kDrop1, dx1)), dx1, a.need_input_grad,
                                        ctx.children[kLn1]);
  }
  void backward_weights(const BackwardArgs& a, LayerContext& ctx) const override {
    PD_CHECK(ctx.children.size() == kParts, describe(), ": weight backward without its input backward");
    for (size_t p = kParts; p-- > 0;) {
      const Part part = static_cast<Part>(p);
      if (part == kGelu) continue;  // no parameters; run with fc1
      if ((part == kFc1 || part == kFc2) && saved_bf16(ctx.children[p], 0))
        linear_backward_weights_bf16(a, part, ctx.children[p]);
      else if (part == kFc1)
        linear_gelu_backward_weights(a, ctx.children[p]);
      else if (part == kLn1 || part == kLn2)
        layernorm_backward_weights(a, part, ctx.children[p]);
      else
        slots_[p].layer->backward_weights(part_args(a, part, false), ctx.children[p]);
    }
    ctx.clear();
  }

 private:
  // ln (kLn1 or kLn2) of x + r (of x when r is undefined), its output in
  // `out` storage (F32, or BF16 under bf16 storage): *s receives the sum;
  // ctx.saved = {the normalised tensor, mean, rstd}, then dy.
  Tensor add_layernorm(const ForwardArgs& a, Part ln, const Tensor& x, const Tensor& r, Tensor* s, DType out,
                       LayerContext& ctx) const {
    const Device dev = x.device();
    const DeviceOps& o = device_ops(dev);
    const int64_t rows = rows_over_last_dim(x, dim_, "transformer block");
    const Tensor* gb = a.params.data() + slots_[ln].first_param;
    Tensor y = Tensor::empty(x.shape(), out, dev);
    Tensor mean = Tensor::empty({rows}, DType::F32, dev), rstd = Tensor::empty({rows}, DType::F32, dev);
    const float* rp = r.defined() ? r.f32() : nullptr;
    float* sp = r.defined() ? s->f32() : nullptr;
    if (out == DType::BF16)
      o.add_layernorm_forward_bf16(rows, dim_, x.f32(), rp, gb[0].f32(), gb[1].f32(), kLayerNormEps, sp, y.bf16(),
                                   mean.f32(), rstd.f32());
    else
      o.add_layernorm_forward(a.step.precision, rows, dim_, x.f32(), rp, gb[0].f32(), gb[1].f32(), kLayerNormEps, sp,
                              y.f32(), mean.f32(), rstd.f32());
    ctx.saved = {r.defined() ? *s : x, mean, rstd};
    return y;
  }
  // dres + the input gradient of ln (rounded under BF16) from dy in either
  // storage; appends dy to ctx.saved.
  Tensor layernorm_backward_input_add(const BackwardArgs& a, Part ln, const Tensor& dy, const Tensor& dres,
                                      bool need_input_grad, LayerContext& ctx) const {
    PD_CHECK(ctx.saved.size() == 3, describe(), ": backward without forward");
    const Tensor& x = ctx.saved[0];
    Tensor dx;
    if (need_input_grad) {
      const DeviceOps& o = device_ops(x.device());
      const int64_t rows = rows_over_last_dim(x, dim_, "transformer block");
      const float* gamma = a.params[slots_[ln].first_param].f32();
      dx = Tensor::empty(x.shape(), DType::F32, x.device());
      if (dy.dtype() == DType::BF16)
        o.layernorm_backward_input_add_bf16(rows, dim_, x.f32(), dy.bf16(), gamma, ctx.saved[1].f32(),
                                            ctx.saved[2].f32(), dres.f32(), dx.f32());
      else
        o.layernorm_backward_input_add(a.step.precision, rows, dim_, x.f32(), dy.f32(), gamma, ctx.saved[1].f32(),
                                       ctx.saved[2].f32(), dres.f32(), dx.f32());
    }
    ctx.saved.push_back(dy);
    return dx;
  }
  void layernorm_backward_weights(const BackwardArgs& a, Part ln, LayerContext& ctx) const {
    PD_CHECK(ctx.saved.size() == 4, describe(), ": weight backward without its input backward");
    const Tensor& x = ctx.saved[0];
    const Tensor& dy = ctx.saved[3];
    const DeviceOps& o = device_ops(x.device());
    const int64_t rows = rows_over_last_dim(x, dim_, "transformer block");
    const size_t k = slots_[ln].first_param;
    if (dy.dtype() == DType::BF16)
      o.layernorm_backward_params_accum_bf16(rows, dim_, x.f32(), dy.bf16(), ctx.saved[1].f32(), ctx.saved[2].f32(),
                                             a.grads[k].f32(), a.grads[k + 1].f32());
    else
      o.layernorm_backward_params_accum(rows, dim_, x.f32(), dy.f32(), ctx.saved[1].f32(), ctx.saved[2].f32(),
                                        a.grads[k].f32(), a.grads[k + 1].f32());
  }
  // gelu(fc1(x)); ctx.saved = {x, pre} (pre: fc1's output, GELU's input), then dpre.
  Tensor linear_gelu(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const {
    const int64_t rows = rows_over_last_dim(x, dim_, "transformer block");
    const size_t k = slots_[kFc1].first_param;
    const Shape ys = with_last(x, 4 * dim_);
    Tensor pre = Tensor::empty(ys, DType::F32, x.device()), y = Tensor::empty(ys, DType::F32, x.device());
    device_ops(x.device()).linear_gelu_forward(a.step.precision, rows, dim_, 4 * dim_, x.f32(), a.params[k].f32(),
                                               a.params[k + 1].f32(), pre.f32(), y.f32());
    ctx.saved = {x, pre};
    return y;
  }
  // dx of fc1 (rounded under BF16 like every part's input gradient) from dy of GELU.
  Tensor linear_gelu_backward_input(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const {
    PD_CHECK(ctx.saved.size() == 2, describe(), ": backward without forward");
    const Tensor& x = ctx.saved[0];
    const Tensor& pre = ctx.saved[1];
    const int64_t rows = rows_over_last_dim(x, dim_, "transformer block");
    const Device dev = x.device();
    Tensor dpre = Tensor::empty(pre.shape(), DType::F32, dev), dx = Tensor::empty(x.shape(), DType::F32, dev);
    device_ops(dev).gelu_backward_rounded(a.step.precision, pre.numel(), pre.f32(), dy.f32(), dpre.f32());
    if (rows > 0)
      device_ops(dev).linear_backward_input(a.step.precision, rows, dim_, 4 * dim_, dpre.f32(),
                                            a.params[slots_[kFc1].first_param].f32(), dx.f32());
    round_in_place_if_bf16(a.step.precision, dx);
    ctx.saved.push_back(dpre);
    return dx;
  }
  void linear_gelu_backward_weights(const BackwardArgs& a, LayerContext& ctx) const {
    PD_CHECK(ctx.saved.size() == 3, describe(), ": weight backward without its input backward");
    const Tensor& x = ctx.saved[0];
    const int64_t rows = rows_over_last_dim(x, dim_, "transformer block");
    const size_t k = slots_[kFc1].first_param;
    if (rows > 0)
      device_ops(x.device())
          .linear_backward_params_accum(a.step.precision, rows, dim_, 4 * dim_, x.f32(), ctx.saved[2].f32(),
                                        a.grads[k].f32(), a.grads[k + 1].f32());
  }

  // --- bf16 storage (DeviceOps *_bf16): ln1's and ln2's outputs,
  // attention's insides (attention.cpp), fc1's pre-activation and GELU's
  // output, and their gradients, are DType::BF16 tensors with the values the
  // FP32-storage path above holds; the residual stream stays FP32. ---
  static bool keeps_bf16(const DeviceOps& o, Precision p) {
    return p == Precision::BF16 && uses_bf16_storage(o) && o.pack_bf16 && o.unpack_bf16 &&
           o.add_layernorm_forward_bf16 && o.linear_gelu_forward_bf16 && o.linear_forward_bf16 &&
           o.linear_backward_input_bf16 && o.linear_backward_params_accum_bf16 && o.gelu_backward_bf16 &&
           o.layernorm_backward_input_add_bf16 && o.layernorm_backward_params_accum_bf16;
  }
  static bool saved_bf16(const LayerContext& c, size_t i) {
    return c.saved.size() > i && c.saved[i].dtype() == DType::BF16;
  }
  Shape with_last(const Tensor& t, int64_t last) const {
    Shape s = t.shape();
    s.back() = last;
    return s;
  }
  // gelu(fc1(x)) of a bf16 x into bf16; ctx.saved = {x, pre}, then dpre.
  Tensor linear_gelu_bf16(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const {
    const size_t k = slots_[kFc1].first_param;
    Tensor pre = Tensor::empty(with_last(x, 4 * dim_), DType::BF16, x.device());
    Tensor y = Tensor::empty(pre.shape(), DType::BF16, x.device());
    const int64_t rows = rows_over_last_dim(x, dim_, "transformer block");
    device_ops(x.device()).linear_gelu_forward_bf16(rows, dim_, 4 * dim_, x.bf16(), a.params[k].f32(),
                                                    a.params[k + 1].f32(), pre.bf16(), y.bf16());
    ctx.saved = {x, pre};
    return y;
  }
  // fc2 of a bf16 x, FP32 output rounded to bf16 values; ctx.saved = {x}, then dy (bf16).
  Tensor fc2_forward_bf16(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const {
    const size_t k = slots_[kFc2].first_param;
    Tensor y = Tensor::empty(with_last(x, dim_), DType::F32, x.device());
    const int64_t rows = rows_over_last_dim(x, 4 * dim_, "transformer block");
    device_ops(x.device()).linear_forward_bf16(rows, 4 * dim_, dim_, x.bf16(), a.params[k].f32(), a.params[k + 1].f32(),
                                               y.f32(), nullptr);
    ctx.saved = {x};
    return y;
  }
  Tensor fc2_backward_input_bf16(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const {
    PD_CHECK(ctx.saved.size() == 1, describe(), ": backward without forward");
    const Tensor& x = ctx.saved[0];
    Tensor dx = Tensor::empty(x.shape(), DType::BF16, x.device());
    const int64_t rows = rows_over_last_dim(x, 4 * dim_, "transformer block");
    device_ops(x.device()).linear_backward_input_bf16(rows, 4 * dim_, dim_, dy.bf16(),
                                                      a.params[slots_[kFc2].first_param].f32(), nullptr, dx.bf16());
    ctx.saved.push_back(dy);
    return dx;
  }
  // dx of fc1 (bf16) from dy of GELU (bf16); appends dpre to ctx.saved.
  Tensor linear_gelu_backward_input_bf16(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const {
    PD_CHECK(ctx.saved.size() == 2, describe(), ": backward without forward");
    const Tensor& x = ctx.saved[0];
    const Tensor& pre = ctx.saved[1];
    const DeviceOps& o = device_ops(x.device());
    Tensor dpre = Tensor::empty(pre.shape(), DType::BF16, x.device());
    Tensor dx = Tensor::empty(x.shape(), DType::BF16, x.device());
    o.gelu_backward_bf16(pre.numel(), pre.bf16(), dy.bf16(), dpre.bf16());
    o.linear_backward_input_bf16(rows_over_last_dim(x, dim_, "transformer block"), dim_, 4 * dim_, dpre.bf16(),
                                 a.params[slots_[kFc1].first_param].f32(), nullptr, dx.bf16());
    ctx.saved.push_back(dpre);
    return dx;
  }
  // fc1 or fc2: ctx.saved = {x, ..., dy} with x and dy bf16 (fc1 keeps pre between them).
  void linear_backward_weights_bf16(const BackwardArgs& a, Part part, LayerContext& ctx) const {
    const size_t expected = part == kFc1 ? 3 : 2;
    PD_CHECK(ctx.saved.size() == expected, describe(), ": weight backward without its input backward");
    const Tensor& x = ctx.saved[0];
    const Tensor& dy = ctx.saved.back();
    const size_t k = slots_[part].first_param;
    const int64_t in = part == kFc1 ? dim_ : 4 * dim_, out = part == kFc1 ? 4 * dim_ : dim_;
    const int64_t rows = rows_over_last_dim(x, in, "transformer block");
    device_ops(x.device()).linear_backward_params_accum_bf16(rows, in, out, x.bf16(), dy.bf16(), a.grads[k].f32(),
                                                             a.grads[k + 1].f32());
  }
  BackwardArgs part_args(const BackwardArgs& a, Part p, bool need_input_grad) const {
    const Slot& s = slots_[p];
    return {a.params.subspan(s.first_param, s.num_params), a.grads.subspan(s.first_param, s.num_params), a.step,
            need_input_grad};
  }

  static constexpr float kLayerNormEps = 1e-5f;  // make_layernorm's default, the parts' eps
  int64_t dim_, heads_;
  float p_;
  std::array<Slot, kParts> slots_;
};

}  // namespace

LayerPtr make_transformer_block(int64_t dim, int64_t heads, float dropout) {
  return std::make_unique<TransformerBlock>(dim, heads, dropout);
}

}  // namespace pd
