#include "core/device_ops.h"
#include "core/error.h"
#include "core/layers.h"

namespace pd {

namespace {

// Training normalises with batch statistics and moves the running
// statistics (buffers) towards them; eval normalises with the running
// statistics. Semantics of torch.nn.BatchNorm2d (momentum, unbiased
// running variance).
class BatchNorm2d : public SplitBackwardLayer {
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

  // Saves {x, save_mean, save_invstd} (the batch statistics) when
  // training, {x, running_mean, running_var} (copies) in eval.
  Tensor forward(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const override {
    PD_CHECK(x.ndim() == 4 && x.dim(1) == c_, describe(), " got input ", shape_str(x.shape()));
    PD_CHECK(a.buffers.size() == 2, describe(), " needs its running statistics");
    const Device dev = x.device();
    const DeviceOps& ops = device_ops(dev);
    Tensor y = Tensor::empty(x.shape(), DType::F32, dev);
    Tensor s1 = Tensor::empty({c_}, DType::F32, dev), s2 = Tensor::empty({c_}, DType::F32, dev);
    const float* gamma = a.params[0].f32();
    const float* beta = a.params[1].f32();
    if (a.step.training) {
      if (x.dim(0) * x.dim(2) * x.dim(3) < 2)
        throw UserError(cat(describe(), ": training needs more than one value per channel, got input ",
                            shape_str(x.shape())));
      ops.batchnorm_forward_train(x.dim(0), c_, x.dim(2), x.dim(3), x.f32(), gamma, beta, momentum_, eps_,
                                  a.buffers[0].f32(), a.buffers[1].f32(), s1.f32(), s2.f32(), y.f32());
    } else {
      s1.copy_from(a.buffers[0]);
      s2.copy_from(a.buffers[1]);
      ops.batchnorm_forward_eval(x.dim(0), c_, x.dim(2), x.dim(3), x.f32(), gamma, beta, s1.f32(), s2.f32(),
                                 eps_, y.f32());
    }
    ctx.saved = {x, s1, s2};
    return y;
  }

  // dx and the per-channel sums dgamma, dbeta (which dx needs with batch
  // statistics): ctx.saved becomes {dgamma, dbeta}.
  Tensor backward_input(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 3, describe(), ": backward without forward");
    const Tensor& x = ctx.saved[0];
    const Device dev = x.device();
    Tensor dx = a.need_input_grad ? Tensor::empty(x.shape(), DType::F32, dev) : Tensor();
    Tensor dgamma = Tensor::empty({c_}, DType::F32, dev), dbeta = Tensor::empty({c_}, DType::F32, dev);
    device_ops(dev).batchnorm_backward_input(a.step.training, x.dim(0), c_, x.dim(2), x.dim(3), x.f32(), dy.f32(),
                                             a.params[0].f32(), ctx.saved[1].f32(), ctx.saved[2].f32(), eps_,
                                             dx.defined() ? dx.f32() : nullptr, dgamma.f32(), dbeta.f32());
    ctx.saved = {dgamma, dbeta};
    return dx;
  }

  void backward_weights(const BackwardArgs& a, LayerContext& ctx) const override {
    PD_CHECK(ctx.saved.size() == 2, describe(), ": weight backward without its input backward");
    const DeviceOps& ops = device_ops(a.grads[0].device());
    ops.add(c_, a.grads[0].f32(), ctx.saved[0].f32(), a.grads[0].f32());
    ops.add(c_, a.grads[1].f32(), ctx.saved[1].f32(), a.grads[1].f32());
    ctx.clear();
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
