#include "core/cpu/batchnorm_kernels.h"
#include "core/device_ops.h"
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
    if (x.device().is_cuda()) return forward_cuda(a, x, ctx);
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
    if (x.device().is_cuda()) return backward_cuda(a, dy, ctx);
    cpu::BatchNormShape s{x.dim(0), c_, x.dim(2) * x.dim(3)};
    Tensor dx = a.need_input_grad ? Tensor::empty(x.shape()) : Tensor();
    cpu::batchnorm2d_backward(s, x.f32(), dy.f32(), ctx.saved[1].f32(), ctx.saved[2].f32(),
                              a.params[0].f32(), a.step.training, dx.defined() ? dx.f32() : nullptr,
                              a.grads[0].f32(), a.grads[1].f32());
    ctx.saved.clear();
    return dx;
  }

 private:
  // Saves {x, save_mean, save_invstd} (cuDNN's batch statistics) when
  // training, {x, running_mean, running_var} (copies) in eval.
  Tensor forward_cuda(const ForwardArgs& a, const Tensor& x, LayerContext& ctx) const {
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
  Tensor backward_cuda(const BackwardArgs& a, const Tensor& dy, LayerContext& ctx) const {
    const Tensor& x = ctx.saved[0];
    const Device dev = x.device();
    const DeviceOps& ops = device_ops(dev);
    Tensor dx;
    if (a.step.training) {
      // cuDNN always writes dx: without a caller for it, into scratch.
      dx = Tensor::empty(x.shape(), DType::F32, dev);
      ops.batchnorm_backward(x.dim(0), c_, x.dim(2), x.dim(3), x.f32(), dy.f32(), a.params[0].f32(),
                             ctx.saved[1].f32(), ctx.saved[2].f32(), eps_, dx.f32(), a.grads[0].f32(),
                             a.grads[1].f32());
      if (!a.need_input_grad) dx = Tensor();
    } else {
      if (a.need_input_grad) dx = Tensor::empty(x.shape(), DType::F32, dev);
      ops.batchnorm_backward_eval(x.dim(0), c_, x.dim(2), x.dim(3), x.f32(), dy.f32(), a.params[0].f32(),
                                  ctx.saved[1].f32(), ctx.saved[2].f32(), eps_,
                                  dx.defined() ? dx.f32() : nullptr, a.grads[0].f32(), a.grads[1].f32());
    }
    ctx.saved.clear();
    return dx;
  }

  int64_t c_;
  float eps_, momentum_;
};

}  // namespace

LayerPtr make_batchnorm2d(int64_t channels, float eps, float momentum) {
  return std::make_unique<BatchNorm2d>(channels, eps, momentum);
}

}  // namespace pd
