#include "core/device_ops.h"
#include "core/layers.h"
#include "core/layers/sequence_parts.h"

namespace pd {

namespace {

class LayerNorm : public SplitBackwardLayer {
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
  // Saves {x, mean, rstd} (per row).
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    const int64_t rows = rows_over_last_dim(x, dim_, "layernorm");
    const Device dev = x.device();
    Tensor y = Tensor::empty(x.shape(), DType::F32, dev);
    Tensor mean = Tensor::empty({rows}, DType::F32, dev), rstd = Tensor::empty({rows}, DType::F32, dev);
    device_ops(dev).layernorm_forward(rows, dim_, x.f32(), a.params[0].f32(), a.params[1].f32(), eps_, y.f32(),
                                      mean.f32(), rstd.f32());
    ctx.saved = {x, mean, rstd};
    return y;
  }
  // dx only; appends dy for backward_weights.
  Tensor backward_input(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 3, describe(), ": backward without forward");
    const Tensor& x = ctx.saved[0];
    const int64_t rows = rows_over_last_dim(x, dim_, "layernorm");
    Tensor dx;
    if (a.need_input_grad) {
      dx = Tensor::empty(x.shape(), DType::F32, x.device());
      device_ops(x.device()).layernorm_backward_input(rows, dim_, x.f32(), dy.f32(), a.params[0].f32(),
                                                      ctx.saved[1].f32(), ctx.saved[2].f32(), dx.f32());
    }
    ctx.saved.push_back(dy);
    return dx;
  }
  void backward_weights(const BackwardArgs& a, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 4, describe(), ": weight backward without its input backward");
    const Tensor& x = ctx.saved[0];
    const int64_t rows = rows_over_last_dim(x, dim_, "layernorm");
    device_ops(x.device()).layernorm_backward_params_accum(rows, dim_, x.f32(), ctx.saved[3].f32(), ctx.saved[1].f32(),
                                                           ctx.saved[2].f32(), a.grads[0].f32(), a.grads[1].f32());
    ctx.clear();
  }

 private:
  int64_t dim_;
  float eps_;
};

}  // namespace

LayerPtr make_layernorm(int64_t dim, float eps) { return std::make_unique<LayerNorm>(dim, eps); }

}  // namespace pd
