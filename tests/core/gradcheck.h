#pragma once
// Checks a layer's backward against central finite differences.
//
// The scalar checked is L = sum(y * r) for a fixed random r, so dL/dy = r.
// Analytic gradients (dx and every parameter gradient) are compared with
// (L(v + h) - L(v - h)) / 2h at a sample of coordinates. Forward runs in
// f32, so h is large-ish (1e-2 relative) and tolerances are relative to the
// gradient's scale: a wrong sign or a missing term is off by O(1) of the
// scale and fails; f32 round-off does not. Both backward paths are
// checked: the fused backward and the split one (backward_input, then
// backward_weights) that zero-bubble schedules run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/layer.h"

namespace pd::testing {

inline Tensor random_tensor(const Shape& s, uint32_t key, float scale = 1.0f) {
  Tensor t = Tensor::empty(s);
  CounterRng rng(1234, key, 99);
  for (int64_t i = 0; i < t.numel(); ++i) t.f32()[i] = scale * (2.0f * rng.uniform(i) - 1.0f);
  return t;
}

// Same definedness, shape and bytes (so -0 differs from +0, and a NaN
// equals itself).
inline bool same_bits(const Tensor& a, const Tensor& b) {
  if (a.defined() != b.defined()) return false;
  return !a.defined() || (a.shape() == b.shape() && a.nbytes() == b.nbytes() &&
                          std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0);
}

struct GradCheckOptions {
  float h = 1e-2f;
  float rtol = 2e-2f;         // relative to max |grad| of that tensor
  int max_coords = 40;        // sampled coordinates per tensor
  bool check_input = true;    // false for integer inputs (embedding)
  bool training = true;
};

// Initialises params with rng (or uses the given ones), then checks.
inline void gradcheck(const Layer& layer, const Tensor& x, const GradCheckOptions& o = {},
                      std::vector<Tensor> params = {}) {
  if (params.empty()) {
    params = allocate_params(layer);
    std::vector<Tensor> bufs0 = allocate_buffers(layer);
    layer.init(params, bufs0, CounterRng(7, 0, 0));
  }
  auto fresh_buffers = [&] {
    std::vector<Tensor> b = allocate_buffers(layer);
    std::vector<Tensor> unused_params = allocate_params(layer);
    layer.init(unused_params, b, CounterRng(7, 0, 0));
    return b;
  };
  StepInfo step;
  step.training = o.training;
  step.seed = 5;
  step.minibatch_id = 3;

  std::vector<Tensor> bufs = fresh_buffers();
  LayerContext ctx;
  Tensor y = layer.forward({params, bufs, step}, x, ctx);
  Tensor r = random_tensor(y.shape(), 77);

  auto loss = [&]() {
    std::vector<Tensor> b = fresh_buffers();
    LayerContext c;
    Tensor yy = layer.forward({params, b, step}, x, c);
    double s = 0;
    for (int64_t i = 0; i < yy.numel(); ++i) s += double(yy.f32()[i]) * r.f32()[i];
    return s;
  };

  std::vector<Tensor> grads;
  for (const Tensor& p : params) grads.push_back(Tensor::zeros(p.shape()));
  Tensor dx = layer.backward({params, grads, step, o.check_input}, r, ctx);

  // The split path, from a fresh forward.
  std::vector<Tensor> split_bufs = fresh_buffers();
  LayerContext split_ctx;
  layer.forward({params, split_bufs, step}, x, split_ctx);
  std::vector<Tensor> split_grads;
  for (const Tensor& p : params) split_grads.push_back(Tensor::zeros(p.shape()));
  Tensor split_dx = layer.backward_input({params, split_grads, step, o.check_input}, r, split_ctx);
  layer.backward_weights({params, split_grads, step, false}, split_ctx);

  auto check = [&](Tensor& v, const Tensor& g, const Tensor& g_split, const std::string& what) {
    ASSERT_TRUE(g.defined()) << what << ": no gradient returned";
    ASSERT_TRUE(g_split.defined()) << what << ": no gradient returned by the split backward";
    ASSERT_EQ(g.shape(), v.shape()) << what;
    ASSERT_EQ(g_split.shape(), v.shape()) << what;
    float scale = 1e-6f;
    for (int64_t i = 0; i < g.numel(); ++i) scale = std::max(scale, std::fabs(g.f32()[i]));
    int64_t n = v.numel();
    int64_t stride = std::max<int64_t>(1, n / o.max_coords);
    for (int64_t i = 0; i < n; i += stride) {
      float keep = v.f32()[i];
      float h = o.h * std::max(1.0f, std::fabs(keep));
      v.f32()[i] = keep + h;
      double lp = loss();
      v.f32()[i] = keep - h;
      double lm = loss();
      v.f32()[i] = keep;
      double num = (lp - lm) / (2.0 * h);
      EXPECT_NEAR(g.f32()[i], num, o.rtol * scale + 1e-4)
          << layer.describe() << " " << what << "[" << i << "] analytic vs numeric";
      EXPECT_NEAR(g_split.f32()[i], num, o.rtol * scale + 1e-4)
          << layer.describe() << " " << what << "[" << i << "] split backward vs numeric";
    }
  };
  if (o.check_input) {
    Tensor xv = x;  // shares storage: perturbs x in place, restored after
    check(xv, dx, split_dx, "input");
  }
  auto specs = layer.param_specs();
  for (size_t k = 0; k < params.size(); ++k) check(params[k], grads[k], split_grads[k], "param " + specs[k].name);
}

}  // namespace pd::testing
