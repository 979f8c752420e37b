#include <cmath>

#include "core/bf16_rounding.h"
#include "core/device_ops.h"
#include "core/layers.h"
#include "core/layers/sequence_parts.h"

namespace pd {

namespace {

// Fused attention (DeviceOps::fused_attention_*): under --precision bf16,
// where the backend has it and supports the shape, the attention core runs
// as one flash-attention kernel each way and the layer saves the softmax's
// per-row log-sum-exp [B, H, T] instead of probs [B, H, T, T]. FP32, the
// CPU, and shapes the backend refuses keep attention_forward/backward.
bool use_fused_attention(const DeviceOps& ops, Precision precision, int64_t B, int64_t T, int64_t heads,
                         int64_t head_dim) {
  return precision == Precision::BF16 && B * T > 0 && ops.fused_attention_supported &&
         ops.fused_attention_forward && ops.fused_attention_backward &&
         ops.fused_attention_supported(B, T, heads, head_dim);
}

// What forward saved in ctx.saved[2]: stats [B, H, T] (fused) or probs [B, H, T, T].
// The stats stay FP32 whatever the precision: the fused backward recomputes
// probs as exp(scores - stats), so a rounded stat would scale a whole row.
bool saved_fused_stats(const Tensor& probs_or_stats) { return probs_or_stats.ndim() == 3; }

// Init: GPT-2 style, weights N(0, 0.02) (proj drawing after qkv), biases 0.
class CausalSelfAttention : public SplitBackwardLayer {
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

  // y = proj(attention(qkv(x))). Saves {x, qkv, probs, att}: qkv
  // [B, T, 3, H, hd], the softmax probabilities [B, H, T, T] (or, fused,
  // their row statistics [B, H, T]) and the pre-projection output att [B, T, D].
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    check_input(x);
    if (x.dtype() == DType::BF16) return forward_bf16(a, x, ctx);
    const int64_t B = x.dim(0), T = x.dim(1), rows = B * T, hd = dim_ / heads_;
    const Device dev = x.device();
    const DeviceOps& ops = device_ops(dev);
    const bool fused = use_fused_attention(ops, a.step.precision, B, T, heads_, hd);
    Tensor qkv = Tensor::empty({B, T, 3 * dim_}, DType::F32, dev);
    Tensor probs = fused ? Tensor::empty({B, heads_, T}, DType::F32, dev)
                         : Tensor::empty({B, heads_, T, T}, DType::F32, dev);
    Tensor att = Tensor::empty({B, T, dim_}, DType::F32, dev);
    Tensor y = Tensor::empty({B, T, dim_}, DType::F32, dev);
    if (rows > 0) {
      ops.linear_forward(a.step.precision, rows, dim_, 3 * dim_, x.f32(), a.params[0].f32(), a.params[1].f32(),
                         qkv.f32());
      round_in_place_if_bf16(a.step.precision, qkv);  // bf16: q, k, v are GEMM operands
      if (fused)
        ops.fused_attention_forward(B, T, heads_, hd, qkv.f32(), att.f32(), probs.f32());
      else
        ops.attention_forward(a.step.precision, B, T, heads_, hd, qkv.f32(), probs.f32(), att.f32());
      round_in_place_if_bf16(a.step.precision, att);  // bf16: proj's operand
      ops.linear_forward(a.step.precision, rows, dim_, dim_, att.f32(), a.params[2].f32(), a.params[3].f32(), y.f32());
    }
    ctx.saved = {x, qkv, probs, att};
    return y;
  }
  // Through the output projection and the attention core to dqkv, which
  // the qkv projection's weight gradient needs whether or not dx is wanted.
  // ctx.saved becomes {x, att, dy, dqkv}.
  Tensor backward_input(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 4, describe(), ": backward without forward");
    if (ctx.saved[1].dtype() == DType::BF16) return backward_input_bf16(a, dy, ctx);
    const Tensor x = ctx.saved[0], qkv = ctx.saved[1], probs = ctx.saved[2], att = ctx.saved[3];
    const int64_t B = x.dim(0), T = x.dim(1), rows = B * T;
    const Device dev = x.device();
    const DeviceOps& ops = device_ops(dev);
    Tensor datt = Tensor::empty({B, T, dim_}, DType::F32, dev);
    Tensor dqkv = Tensor::empty({B, T, 3 * dim_}, DType::F32, dev);
    Tensor dx = a.need_input_grad ? Tensor::empty(x.shape(), DType::F32, dev) : Tensor();
    if (rows > 0) {
      ops.linear_backward_input(a.step.precision, rows, dim_, dim_, dy.f32(), a.params[2].f32(), datt.f32());
      round_in_place_if_bf16(a.step.precision, datt);  // bf16: dO is a GEMM operand
      if (saved_fused_stats(probs))
        ops.fused_attention_backward(B, T, heads_, dim_ / heads_, qkv.f32(), att.f32(), probs.f32(), datt.f32(),
                                     dqkv.f32());
      else
        ops.attention_backward(a.step.precision, B, T, heads_, dim_ / heads_, qkv.f32(), probs.f32(), datt.f32(),
                               dqkv.f32());
      round_in_place_if_bf16(a.step.precision, dqkv);  // bf16: qkv's backward operand
      if (dx.defined())
        ops.linear_backward_input(a.step.precision, rows, dim_, 3 * dim_, dqkv.f32(), a.params[0].f32(), dx.f32());
    }
    ctx.saved = {x, att, dy, dqkv};
    return dx;
  }
  void backward_weights(const BackwardArgs& a, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 4, describe(), ": weight backward without its input backward");
    const Tensor& x = ctx.saved[0];
    const int64_t rows = x.dim(0) * x.dim(1);
    const DeviceOps& ops = device_ops(x.device());
    if (rows > 0 && x.dtype() == DType::BF16) {
      ops.linear_backward_params_accum_bf16(rows, dim_, dim_, ctx.saved[1].bf16(), ctx.saved[2].bf16(),
                                            a.grads[2].f32(), a.grads[3].f32());
      ops.linear_backward_params_accum_bf16(rows, dim_, 3 * dim_, x.bf16(), ctx.saved[3].bf16(), a.grads[0].f32(),
                                            a.grads[1].f32());
    } else if (rows > 0) {
      ops.linear_backward_params_accum(a.step.precision, rows, dim_, dim_, ctx.saved[1].f32(), ctx.saved[2].f32(),
                                       a.grads[2].f32(), a.grads[3].f32());
      ops.linear_backward_params_accum(a.step.precision, rows, dim_, 3 * dim_, x.f32(), ctx.saved[3].f32(),
                                       a.grads[0].f32(), a.grads[1].f32());
    }
    ctx.clear();
  }

 private:
  // On bf16 storage (x bf16: a transformer block under bf16 storage hands
  // ln1's output so): qkv, att, dy, datt, dqkv and dx are bf16 tensors
  // with the values forward/backward_input above hold, y FP32 holding bf16
  // values. Without fused attention the FP32 core runs between unpacking
  // and packing. Saves {x, qkv, probs or stats, att}, then {x, att, dy, dqkv}.
  Tensor forward_bf16(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const {
    const int64_t B = x.dim(0), T = x.dim(1), rows = B * T, hd = dim_ / heads_;
    const Device dev = x.device();
    const DeviceOps& ops = device_ops(dev);
    const bool fused = use_fused_attention(ops, a.step.precision, B, T, heads_, hd) &&
                       ops.fused_attention_forward_bf16 && ops.fused_attention_backward_bf16;
    Tensor qkv = Tensor::empty({B, T, 3 * dim_}, DType::BF16, dev);
    Tensor probs = fused ? Tensor::empty({B, heads_, T}, DType::F32, dev)
                         : Tensor::empty({B, heads_, T, T}, DType::F32, dev);
    Tensor att = Tensor::empty({B, T, dim_}, DType::BF16, dev);
    Tensor y = Tensor::empty({B, T, dim_}, DType::F32, dev);
    if (rows > 0) {
      ops.linear_forward_bf16(rows, dim_, 3 * dim_, x.bf16(), a.params[0].f32(), a.params[1].f32(), nullptr,
                              qkv.bf16());
      if (fused) {
        ops.fused_attention_forward_bf16(B, T, heads_, hd, qkv.bf16(), att.bf16(), probs.f32());
      } else {
        Tensor att32 = Tensor::empty({B, T, dim_}, DType::F32, dev);
        ops.attention_forward(a.step.precision, B, T, heads_, hd, unpacked_bf16(qkv).f32(), probs.f32(), att32.f32());
        ops.pack_bf16(att32.numel(), att32.f32(), att.bf16());
      }
      ops.linear_forward_bf16(rows, dim_, dim_, att.bf16(), a.params[2].f32(), a.params[3].f32(), y.f32(), nullptr);
    }
    ctx.saved = {x, qkv, probs, att};
    return y;
  }
  // dy: FP32 holding bf16 values (the block rounds what it hands back).
  Tensor backward_input_bf16(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const {
    const Tensor x = ctx.saved[0], qkv = ctx.saved[1], probs = ctx.saved[2], att = ctx.saved[3];
    const int64_t B = x.dim(0), T = x.dim(1), rows = B * T, hd = dim_ / heads_;
    const Device dev = x.device();
    const DeviceOps& ops = device_ops(dev);
    const Tensor dy16 = packed_bf16(dy);
    Tensor datt = Tensor::empty({B, T, dim_}, DType::BF16, dev);
    Tensor dqkv = Tensor::empty({B, T, 3 * dim_}, DType::BF16, dev);
    Tensor dx = a.need_input_grad ? Tensor::empty(x.shape(), DType::BF16, dev) : Tensor();
    if (rows > 0) {
      ops.linear_backward_input_bf16(rows, dim_, dim_, dy16.bf16(), a.params[2].f32(), nullptr, datt.bf16());
      if (saved_fused_stats(probs)) {
        ops.fused_attention_backward_bf16(B, T, heads_, hd, qkv.bf16(), att.bf16(), probs.f32(), datt.bf16(),
                                          dqkv.bf16());
      } else {
        Tensor dqkv32 = Tensor::empty({B, T, 3 * dim_}, DType::F32, dev);
        ops.attention_backward(a.step.precision, B, T, heads_, hd, unpacked_bf16(qkv).f32(), probs.f32(),
                               unpacked_bf16(datt).f32(), dqkv32.f32());
        ops.pack_bf16(dqkv32.numel(), dqkv32.f32(), dqkv.bf16());
      }
      if (dx.defined())
        ops.linear_backward_input_bf16(rows, dim_, 3 * dim_, dqkv.bf16(), a.params[0].f32(), nullptr, dx.bf16());
    }
    ctx.saved = {x, att, dy16, dqkv};
    return dx;
  }

  void check_input(const Tensor& x) const {
    PD_CHECK(x.ndim() == 3 && x.dim(2) == dim_, describe(), " expects [batch, T, ", dim_, "], got ",
             shape_str(x.shape()));
  }
  int64_t dim_, heads_;
};

}  // namespace

LayerPtr make_causal_self_attention(int64_t dim, int64_t heads) {
  return std::make_unique<CausalSelfAttention>(dim, heads);
}

}  // namespace pd
