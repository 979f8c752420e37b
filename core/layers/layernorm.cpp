#include "core/cpu/layernorm_kernels.h"
#include "core/layers.h"
#include "core/layers/sequence_parts.h"

namespace pd {

namespace {

class LayerNorm : public Layer {
 public:
  LayerNorm(int64_t dim, float eps) : dim_(dim), eps_(eps) {
    if (dim < 1) throw UserError(cat("layernorm: dim must be positive, got ", dim));
    if (!(eps > 0.0f)) throw UserError(cat("layernorm: eps must be positive, got ", eps));
  }
  std::string type() const override { return "layernorm"; }
  std::string describe() const override { return cat("layernorm(", dim_, ")"); }
  std::vector<ParamSpec> param_specs() const override {
    return {{"weight", {dim_}}, {"bias", {dim_}}};
  }
  void init(std::span<Tensor> params, std::span<Tensor>, const CounterRng&) const override {
    params[0].fill(1.0f);
    params[1].zero();
  }
  Shape output_shape(const Shape& in) const override {
    if (in.empty() || in.back() != dim_)
      throw UserError(cat(describe(), ": input ", shape_str(in), " must end in ", dim_, " features"));
    return in;
  }
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    int64_t rows = rows_over_last_dim(x, dim_, "layernorm");
    Tensor y = Tensor::empty(x.shape());
    Tensor mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
    cpu::layernorm_forward(x.f32(), a.params[0].f32(), a.params[1].f32(), y.f32(), mean.f32(),
                           rstd.f32(), rows, dim_, eps_);
    ctx.saved = {x, mean, rstd};
    return y;
  }
  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    const Tensor& x = ctx.saved.at(0);
    int64_t rows = rows_over_last_dim(x, dim_, "layernorm");
    Tensor dx = a.need_input_grad ? Tensor::empty(x.shape()) : Tensor();
    cpu::layernorm_backward(x.f32(), a.params[0].f32(), ctx.saved[1].f32(), ctx.saved[2].f32(),
                            dy.f32(), dx.defined() ? dx.f32() : nullptr, a.grads[0].f32(),
                            a.grads[1].f32(), rows, dim_);
    ctx.clear();
    return dx;
  }

 private:
  int64_t dim_;
  float eps_;
};

}  // namespace

LayerPtr make_layernorm(int64_t dim, float eps) { return std::make_unique<LayerNorm>(dim, eps); }

}  // namespace pd
