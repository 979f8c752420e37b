#pragma once
// Naive double-precision references and helpers for the sequence-layer
// tests (linear, GELU, dropout, LayerNorm, embedding, attention, block).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/layer.h"
#include "tests/core/gradcheck.h"

namespace pd::testing {

inline std::vector<float> random_vec(size_t n, uint32_t key, float scale = 1.0f) {
  Tensor t = random_tensor({static_cast<int64_t>(n)}, key, scale);
  return t.to_floats();
}

// max |a - b| / max(1, max |b|): a relative error over the whole array.
inline double rel_err(const float* a, const std::vector<double>& b) {
  double scale = 1.0, err = 0.0;
  for (size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, std::fabs(b[i]));
    err = std::max(err, std::fabs(double(a[i]) - b[i]));
  }
  return err / scale;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::equal(a.f32(), a.f32() + a.numel(), b.f32());
}

// Runs forward then backward with dL/dy = r and returns (y, dx, grads).
struct StepResult {
  Tensor y, dx;
  std::vector<Tensor> grads;
};
inline StepResult forward_backward(const Layer& l, const std::vector<Tensor>& params, const Tensor& x,
                                   const Tensor& dy, StepInfo step = {}) {
  LayerContext ctx;
  std::vector<Tensor> bufs = allocate_buffers(l);
  StepResult r;
  r.y = l.forward({params, bufs, step}, x, ctx);
  for (const Tensor& p : params) r.grads.push_back(Tensor::zeros(p.shape()));
  r.dx = l.backward({params, r.grads, step, true}, dy.defined() ? dy : random_tensor(r.y.shape(), 5), ctx);
  return r;
}

inline std::vector<Tensor> init_params(const Layer& l, uint64_t seed = 7, uint32_t index = 0) {
  std::vector<Tensor> p = allocate_params(l);
  std::vector<Tensor> b = allocate_buffers(l);
  l.init(p, b, CounterRng(seed, index, 0));
  return p;
}

// Runs a scope on one compute thread. Finite-difference checks make
// hundreds of tiny forward passes, which on a busy machine spend most of
// their time waiting at OpenMP barriers; the threaded paths are covered by
// the kernel and reproducibility tests.
class OneComputeThread {
 public:
  OneComputeThread() : keep_(cpu::compute_threads()) { cpu::set_compute_threads(1); }
  ~OneComputeThread() { cpu::set_compute_threads(keep_); }

 private:
  int keep_;
};

// Gaussian-free GELU reference (tanh form) in double.
inline double gelu_ref(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

}  // namespace pd::testing
