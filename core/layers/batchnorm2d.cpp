#include "core/cpu/batchnorm_kernels.h"
#include "core/error.h"
#include "core/layers.h"

namespace pd {

namespace {

// Training normalises with batch statistics and moves the running
// statistics (buffers) towards them; eval normalises with the running
// statistics. Semantics of torch.nn.BatchNorm2d (momentum, unbiased
// running variance).
class BatchNorm2d : public Layer {
 public:
  BatchNorm2d(int64_t channels, float eps, float momentum) : c_(channels), eps_(eps), momentum_(momentum) {
    if (channels < 1) throw UserError(cat("batchnorm2d: channels must be positive, got ", channels));
    if (!(eps > 0)) throw UserError(cat("batchnorm2d: eps must be positive, got ", eps));
    if (!(momentum >= 0 && momentum <= 1))
      throw UserError(cat("batchnorm2d: momentum must be in [0, 1], got ", momentum));
  }
  std::string type() const override { return "batchnorm2d"; }
  std::string describe() const override { return cat("batchnorm2d(", c_, ")"); }
  std::vector<ParamSpec> param_specs() const override { return {{"weight", {c_}}, {"bias", {c_}}}; }
  std::vector<ParamSpec> buffer_specs() const override {
    return {{"running_mean", {c_}}, {"running_var", {c_}}};
  }
  void init(std::span<Tensor> params, std::span<Tensor> buffers, const CounterRng&) const override {
    params[0].fill(1.0f);
    params[1].fill(0.0f);
    buffers[0].fill(0.0f);
    buffers[1].fill(1.0f);
  }
  Shape output_shape(const Shape& in) const override {
    if (in.size() != 3 || in[0] != c_)
      throw UserError(cat(describe(), " expects input [", c_, ", H, W], got ", shape_str(in)));
    return in;
  }

  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    PD_CHECK(x.ndim() == 4 && x.dim(1) == c_, describe(), " got input ", shape_str(x.shape()));
    PD_CHECK(a.buffers.size() == 2, describe(), " needs its running statistics");
    cpu::BatchNormShape s{x.dim(0), c_, x.dim(2) * x.dim(3)};
    Tensor y = Tensor::empty(x.shape());
    Tensor mean = Tensor::empty({c_}), invstd = Tensor::empty({c_});
    const float* gamma = a.params[0].f32();
    const float* beta = a.params[1].f32();
    if (a.step.training) {
      if (s.count() < 2)
        throw UserError(cat(describe(), ": training needs more than one value per channel, got input ",
                            shape_str(x.shape())));
      Tensor var = Tensor::empty({c_});
      cpu::batchnorm2d_forward_train(s, x.f32(), gamma, beta, eps_, y.f32(), mean.f32(), var.f32(),
                                     invstd.f32());
      cpu::batchnorm_update_running(c_, s.count(), momentum_, mean.f32(), var.f32(), a.buffers[0].f32(),
                                    a.buffers[1].f32());
    } else {
      mean.copy_from(a.buffers[0]);
      cpu::batchnorm_invstd(c_, a.buffers[1].f32(), eps_, invstd.f32());
      cpu::batchnorm2d_forward_eval(s, x.f32(), gamma, beta, mean.f32(), invstd.f32(), y.f32());
    }
    ctx.saved = {x, mean, invstd};
    return y;
  }

  Tensor backward(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 3, describe(), ": backward without forward");
    const Tensor& x = ctx.saved[0];
    cpu::BatchNormShape s{x.dim(0), c_, x.dim(2) * x.dim(3)};
    Tensor dx = a.need_input_grad ? Tensor::empty(x.shape()) : Tensor();
    cpu::batchnorm2d_backward(s, x.f32(), dy.f32(), ctx.saved[1].f32(), ctx.saved[2].f32(),
                              a.params[0].f32(), a.step.training, dx.defined() ? dx.f32() : nullptr,
                              a.grads[0].f32(), a.grads[1].f32());
    ctx.saved.clear();
    return dx;
  }

 private:
  int64_t c_;
  float eps_, momentum_;
};

}  // namespace

LayerPtr make_batchnorm2d(int64_t channels, float eps, float momentum) {
  return std::make_unique<BatchNorm2d>(channels, eps, momentum);
}

}  // namespace pd
