#pragma once
// One element of the SGD and Adam updates (PyTorch semantics, documented
// at DeviceOps::sgd_step / adam_step): the per-tensor kernels and the
// multi-tensor kernels inline the same code, so they give the same bits.
#include <cstdint>

namespace pd::cuda::kernels {

struct SgdRule {
  float lr, momentum, weight_decay;
  bool nesterov;
};

struct AdamRule {
  float lr, beta1, beta2, eps, weight_decay;
  bool decoupled;
  float bias_c1, bias_c2;  // 1 - beta^t
};

__device__ inline void sgd_element(const SgdRule& r, float* p, const float* grad, float* buf, int64_t i) {
  float g = grad[i];
  if (r.weight_decay != 0.0f) g += r.weight_decay * p[i];
  if (r.momentum != 0.0f) {
    float b = r.momentum * buf[i] + g;
    buf[i] = b;
    g = r.nesterov ? g + r.momentum * b : b;
  }
  p[i] -= r.lr * g;
}

__device__ inline void adam_element(const AdamRule& r, float* p, const float* grad, float* m, float* v,
                                    int64_t i) {
  float g = grad[i];
  float w = p[i];
  if (r.weight_decay != 0.0f) {
    if (r.decoupled)
      w *= 1.0f - r.lr * r.weight_decay;
    else
      g += r.weight_decay * w;
  }
  float mi = r.beta1 * m[i] + (1.0f - r.beta1) * g;
  float vi = r.beta2 * v[i] + (1.0f - r.beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  float mhat = mi / r.bias_c1;
  float vhat = vi / r.bias_c2;
  p[i] = w - r.lr * mhat / (sqrtf(vhat) + r.eps);
}

}  // namespace pd::cuda::kernels
