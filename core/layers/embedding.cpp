#include "core/device_ops.h"
#include "core/layers.h"
#include "core/layers/sequence_parts.h"

namespace pd {

namespace {

// Init: GPT-2 style, both tables N(0, 0.02); the position table draws from
// the elements after the token table's.
class Embedding : public SplitBackwardLayer {
 public:
  Embedding(int64_t vocab, int64_t dim, int64_t context) : vocab_(vocab), dim_(dim), context_(context) {
    if (vocab < 1 || dim < 1 || context < 1)
      throw UserError(cat("embedding: vocab, dim and context must be positive, got ", vocab, ", ",
                          dim, ", ", context));
    if (vocab > INT32_MAX) throw UserError(cat("embedding: vocab ", vocab, " does not fit 32-bit token ids"));
  }
  std::string type() const override { return "embedding"; }
  std::string describe() const override {
    return cat("embedding(vocab ", vocab_, ", dim ", dim_, ", context ", context_, ")");
  }
  std::vector<ParamSpec> param_specs() const override {
    return {{"token.weight", {vocab_, dim_}}, {"position.weight", {context_, dim_}}};
  }
  void init(std::span<Tensor> params, std::span<Tensor>, const CounterRng& rng) const override {
    fill_normal(params[0], rng, 0, 0.02f);
    fill_normal(params[1], rng, static_cast<uint64_t>(params[0].numel()), 0.02f);
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 1)
      throw UserError(cat(describe(), ": input must be a sequence of token ids [T], got ", shape_str(in)));
    if (in[0] < 1 || in[0] > context_)
      throw UserError(cat(describe(), ": sequence length ", in[0], " must be in 1..", context_));
    return {in[0], dim_};
  }
  DType input_dtype() const override { return DType::I32; }

  // The tables may live on a GPU while the token ids come from the host:
  // ids on the host are checked there (a UserError naming the position)
  // and copied to the tables' device. Saves {ids} on that device.
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    PD_CHECK(x.ndim() == 2, "embedding expects token ids [batch, T], got ", shape_str(x.shape()));
    const int64_t batch = x.dim(0), T = x.dim(1);
    output_shape({T});
    const Device dev = a.params[0].device();
    if (x.device().is_cpu()) check_token_ids(x);
    Tensor ids = x.device() == dev ? x : x.to(dev);
    Tensor y = Tensor::empty({batch, T, dim_}, DType::F32, dev);
    device_ops(dev).embedding_forward(batch, T, dim_, vocab_, ids.data<int32_t>(), a.params[0].f32(),
                                      a.params[1].f32(), y.f32());
    ctx.saved = {ids};
    return y;
  }
  // Token ids have no gradient: returns an undefined tensor and keeps dy.
  Tensor backward_input(const BackwardArgs&, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 1, describe(), ": backward without forward");
    ctx.saved.push_back(dy);
    return Tensor();
  }
  void backward_weights(const BackwardArgs& a, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 2, describe(), ": weight backward without its input backward");
    const Tensor& ids = ctx.saved[0];
    device_ops(ids.device()).embedding_backward_accum(ids.dim(0), ids.dim(1), dim_, vocab_, ids.data<int32_t>(),
                                                      ctx.saved[1].f32(), a.grads[0].f32(), a.grads[1].f32());
    ctx.clear();
  }

 private:
  void check_token_ids(const Tensor& x) const {
    const int32_t* ids = x.data<int32_t>();
    for (int64_t i = 0; i < x.numel(); ++i)
      if (ids[i] < 0 || ids[i] >= vocab_)
        throw UserError(cat(describe(), ": token id ", ids[i], " at position ", i,
                            " is outside the vocabulary 0..", vocab_ - 1));
  }

  int64_t vocab_, dim_, context_;
};

}  // namespace

LayerPtr make_embedding(int64_t vocab, int64_t dim, int64_t context) {
  return std::make_unique<Embedding>(vocab, dim, context);
}

}  // namespace pd
