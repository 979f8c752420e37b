#include "core/optimizer_on_device.h"

#include <vector>

#include "core/device_ops.h"
#include "core/error.h"

namespace pd {

namespace {

void check_on_device(const Tensor& p, const Tensor& g) {
  PD_CHECK(p.device().is_cuda() && g.device() == p.device(), "GPU optimizer step given ", p.device().str(),
           " params with ", g.device().str(), " grads");
  PD_CHECK(p.numel() == g.numel(), "param/grad size mismatch: ", shape_str(p.shape()), " vs ",
           shape_str(g.shape()));
}

// Pointer and size arrays for the multi-tensor entries.
struct TensorArrays {
  std::vector<int64_t> sizes;
  std::vector<float*> params, slot_a, slot_b;
  std::vector<const float*> grads;
};

}  // namespace

void sgd_step_on_device(const OptimizerConfig& c, std::span<Tensor> params, std::span<const Tensor> grads,
                        OptimizerState& st, float lr) {
  PD_CHECK(params.size() == grads.size(), "params/grads count mismatch");
  const bool use_momentum = c.momentum != 0.0f;
  PD_CHECK(!use_momentum || st.slots.size() == params.size(), "optimizer state not made for these params");
  if (!params.empty() && device_ops(params[0].device()).sgd_step_multi) {
    TensorArrays t;
    for (size_t i = 0; i < params.size(); ++i) {
      check_on_device(params[i], grads[i]);
      PD_CHECK(params[i].device() == params[0].device(), "GPU optimizer step given params on two devices");
      t.sizes.push_back(params[i].numel());
      t.params.push_back(params[i].f32());
      t.grads.push_back(grads[i].f32());
      t.slot_a.push_back(use_momentum ? st.slots[i].f32() : nullptr);
    }
    device_ops(params[0].device())
        .sgd_step_multi(static_cast<int64_t>(t.sizes.size()), t.sizes.data(), t.params.data(), t.grads.data(),
                        use_momentum ? t.slot_a.data() : nullptr, lr, c.momentum, c.weight_decay, c.nesterov);
    ++st.step;
    return;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    check_on_device(params[i], grads[i]);
    device_ops(params[i].device())
        .sgd_step(params[i].numel(), lr, c.momentum, c.weight_decay, c.nesterov, params[i].f32(), grads[i].f32(),
                  use_momentum ? st.slots[i].f32() : nullptr);
  }
  ++st.step;
}

void adam_step_on_device(const OptimizerConfig& c, bool decoupled, std::span<Tensor> params,
                         std::span<const Tensor> grads, OptimizerState& st, float lr) {
  PD_CHECK(params.size() == grads.size(), "params/grads count mismatch");
  PD_CHECK(st.slots.size() == 2 * params.size(), "optimizer state not made for these params");
  const int64_t t = ++st.step;
  if (!params.empty() && device_ops(params[0].device()).adam_step_multi) {
    TensorArrays a;
    for (size_t i = 0; i < params.size(); ++i) {
      check_on_device(params[i], grads[i]);
      PD_CHECK(params[i].device() == params[0].device(), "GPU optimizer step given params on two devices");
      a.sizes.push_back(params[i].numel());
      a.params.push_back(params[i].f32());
      a.grads.push_back(grads[i].f32());
      a.slot_a.push_back(st.slots[2 * i].f32());
      a.slot_b.push_back(st.slots[2 * i + 1].f32());
    }
    device_ops(params[0].device())
        .adam_step_multi(static_cast<int64_t>(a.sizes.size()), a.sizes.data(), a.params.data(), a.grads.data(),
                         a.slot_a.data(), a.slot_b.data(), lr, c.beta1, c.beta2, c.eps, c.weight_decay, decoupled, t);
    return;
  }
  for (size_t i = 0; i < params.size(); ++i) {
    check_on_device(params[i], grads[i]);
    device_ops(params[i].device())
        .adam_step(params[i].numel(), lr, c.beta1, c.beta2, c.eps, c.weight_decay, decoupled, t, params[i].f32(),
                   grads[i].f32(), st.slots[2 * i].f32(), st.slots[2 * i + 1].f32());
  }
}

}  // namespace pd
