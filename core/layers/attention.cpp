#include "core/cpu/attention_kernels.h"
#include <cmath>

#include "core/cpu/linear_kernels.h"
#include "core/layers/device_linear.h"
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
    if (x.device().is_cuda()) return forward_cuda(a, x, s, ctx);
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
    if (x.device().is_cuda()) return backward_cuda(a, dy, s, ctx);
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
  // On a GPU, with the CPU's qkv layout [B, T, 3, H, hd]: qkv is permuted to
  // heads-major [3, B, H, T, hd] so that q, k and v of every (batch, head)
  // are contiguous [T, hd] matrices for strided-batched GEMMs. Saves x, the
  // permuted qkv, probs [B, H, T, T] and the pre-projection output.
  Tensor forward_cuda(const ForwardArgs& a, const Tensor& x, const cpu::AttentionShape& s,
                      LayerContext& ctx) const {
    const Device dev = x.device();
    const DeviceOps& ops = device_ops(dev);
    const int64_t B = s.batch, T = s.seq, H = s.heads, hd = s.head_dim, rows = B * T, BH = B * H;
    const int64_t mat = T * hd, part = BH * mat;
    Tensor qkv = Tensor::empty({B, T, 3 * dim_}, DType::F32, dev);
    device_linear_forward(ops, x.f32(), a.params[0].f32(), a.params[1].f32(), qkv.f32(), rows, dim_, 3 * dim_);
    Tensor heads = Tensor::empty({3, B, H, T, hd}, DType::F32, dev);
    const int64_t qkv_shape[5] = {B, T, 3, H, hd};
    const int to_heads[5] = {2, 0, 3, 1, 4};
    ops.permute(5, qkv_shape, to_heads, qkv.f32(), heads.f32());
    const float* q = heads.f32();
    const float* k = q + part;
    const float* v = k + part;
    Tensor probs = Tensor::empty({B, H, T, T}, DType::F32, dev);
    ops.gemm_strided_batched(false, true, T, T, hd, 1.0f, q, hd, mat, k, hd, mat, 0.0f, probs.f32(), T, T * T, BH);
    ops.causal_softmax_forward(BH, T, softmax_scale(hd), probs.f32(), probs.f32());
    Tensor out_heads = Tensor::empty({B, H, T, hd}, DType::F32, dev);
    ops.gemm_strided_batched(false, false, T, hd, T, 1.0f, probs.f32(), T, T * T, v, hd, mat, 0.0f,
                             out_heads.f32(), hd, mat, BH);
    Tensor att = Tensor::empty({B, T, dim_}, DType::F32, dev);
    const int64_t heads_shape[4] = {B, H, T, hd};
    const int swap_ht[4] = {0, 2, 1, 3};
    ops.permute(4, heads_shape, swap_ht, out_heads.f32(), att.f32());
    Tensor y = Tensor::empty({B, T, dim_}, DType::F32, dev);
    device_linear_forward(ops, att.f32(), a.params[2].f32(), a.params[3].f32(), y.f32(), rows, dim_, dim_);
    ctx.saved = {x, heads, probs, att};
    return y;
  }
  Tensor backward_cuda(const BackwardArgs& a, const Tensor& dy, const cpu::AttentionShape& s,
                       LayerContext& ctx) const {
    const Tensor& x = ctx.saved[0];
    const Tensor& heads = ctx.saved[1];
    const Tensor& probs = ctx.saved[2];
    const Device dev = x.device();
    const DeviceOps& ops = device_ops(dev);
    const int64_t B = s.batch, T = s.seq, H = s.heads, hd = s.head_dim, rows = B * T, BH = B * H;
    const int64_t mat = T * hd, part = BH * mat;
    Tensor datt = Tensor::empty({B, T, dim_}, DType::F32, dev);
    device_linear_backward(ops, ctx.saved[3].f32(), a.params[2].f32(), dy.f32(), datt.f32(), a.grads[2].f32(),
                           a.grads[3].f32(), rows, dim_, dim_);
    Tensor dout_heads = Tensor::empty({B, H, T, hd}, DType::F32, dev);
    const int64_t att_shape[4] = {B, T, H, hd};
    const int swap_th[4] = {0, 2, 1, 3};
    ops.permute(4, att_shape, swap_th, datt.f32(), dout_heads.f32());
    const float* q = heads.f32();
    const float* k = q + part;
    const float* v = k + part;
    Tensor dheads = Tensor::empty({3, B, H, T, hd}, DType::F32, dev);
    float* dq = dheads.f32();
    float* dk = dq + part;
    float* dv = dk + part;
    // dv = probsᵀ dout; dprobs = dout vᵀ, turned into dscores in place.
    ops.gemm_strided_batched(true, false, T, hd, T, 1.0f, probs.f32(), T, T * T, dout_heads.f32(), hd, mat, 0.0f,
                             dv, hd, mat, BH);
    Tensor dscores = Tensor::empty({B, H, T, T}, DType::F32, dev);
    ops.gemm_strided_batched(false, true, T, T, hd, 1.0f, dout_heads.f32(), hd, mat, v, hd, mat, 0.0f,
                             dscores.f32(), T, T * T, BH);
    ops.causal_softmax_backward(BH, T, softmax_scale(hd), probs.f32(), dscores.f32(), dscores.f32());
    // dq = dscores k; dk = dscoresᵀ q.
    ops.gemm_strided_batched(false, false, T, hd, T, 1.0f, dscores.f32(), T, T * T, k, hd, mat, 0.0f, dq, hd,
                             mat, BH);
    ops.gemm_strided_batched(true, false, T, hd, T, 1.0f, dscores.f32(), T, T * T, q, hd, mat, 0.0f, dk, hd,
                             mat, BH);
    Tensor dqkv = Tensor::empty({B, T, 3 * dim_}, DType::F32, dev);
    const int64_t dheads_shape[5] = {3, B, H, T, hd};
    const int to_rows[5] = {1, 3, 0, 2, 4};
    ops.permute(5, dheads_shape, to_rows, dheads.f32(), dqkv.f32());
    Tensor dx = a.need_input_grad ? Tensor::empty(x.shape(), DType::F32, dev) : Tensor();
    device_linear_backward(ops, x.f32(), a.params[0].f32(), dqkv.f32(), dx.defined() ? dx.f32() : nullptr,
                           a.grads[0].f32(), a.grads[1].f32(), rows, dim_, 3 * dim_);
    ctx.clear();
    return dx;
  }
  static float softmax_scale(int64_t head_dim) { return 1.0f / std::sqrt(static_cast<float>(head_dim)); }

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
