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

// The tensors' pointers and sizes, as the multi-tensor entries take them:
// slot k of param i is st.slots[slots_per_param * i + k].
struct TensorArrays {
  std::vector<int64_t> sizes;
  std::vector<float*> params, slot_a, slot_b;
  std::vector<const float*> grads;
  TensorArrays(std::span<Tensor> p, std::span<const Tensor> g, OptimizerState& st, int slots_per_param) {
    for (size_t i = 0; i < p.size(); ++i) {
      check_on_device(p[i], g[i]);
      PD_CHECK(p[i].device() == p[0].device(), "GPU optimizer step given params on two devices");
      sizes.push_back(p[i].numel());
      params.push_back(p[i].f32());
      grads.push_back(g[i].f32());
      if (slots_per_param > 0) slot_a.push_back(st.slots[slots_per_param * i].f32());
      if (slots_per_param > 1) slot_b.push_back(st.slots[slots_per_param * i + 1].f32());
    }
  }
  int64_t count() const { return static_cast<int64_t>(sizes.size()); }
};

}  // namespace

void sgd_step_on_device(const OptimizerConfig& c, std::span<Tensor> params, std::span<const Tensor> grads,
                        OptimizerState& st, float lr) {
  PD_CHECK(params.size() == grads.size(), "params/grads count mismatch");
  const bool use_momentum = c.momentum != 0.0f;
  PD_CHECK(!use_momentum || st.slots.size() == params.size(), "optimizer state not made for these params");
  ++st.step;
  if (params.empty()) return;
  TensorArrays t(params, grads, st, use_momentum ? 1 : 0);
  device_ops(params[0].device())
      .sgd_step_multi(t.count(), t.sizes.data(), t.params.data(), t.grads.data(),
                      use_momentum ? t.slot_a.data() : nullptr, lr, c.momentum, c.weight_decay, c.nesterov);
}

void adam_step_on_device(const OptimizerConfig& c, bool decoupled, std::span<Tensor> params,
                         std::span<const Tensor> grads, OptimizerState& st, float lr) {
  PD_CHECK(params.size() == grads.size(), "params/grads count mismatch");
  PD_CHECK(st.slots.size() == 2 * params.size(), "optimizer state not made for these params");
  const int64_t t = ++st.step;
  if (params.empty()) return;
  TensorArrays a(params, grads, st, 2);
  device_ops(params[0].device())
      .adam_step_multi(a.count(), a.sizes.data(), a.params.data(), a.grads.data(), a.slot_a.data(), a.slot_b.data(),
                       lr, c.beta1, c.beta2, c.eps, c.weight_decay, decoupled, t);
}

}  // namespace pd
