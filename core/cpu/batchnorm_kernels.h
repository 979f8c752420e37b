#pragma once
// BatchNorm over NCHW on raw host pointers, one channel per loop iteration
// (statistics reduce over N*H*W inside one thread: deterministic).
#include <cstdint>

namespace pd::cpu {

struct BatchNormShape {
  int64_t batch = 0, channels = 0, plane = 0;  // plane = H*W
  int64_t count() const { return batch * plane; }
};

// Training: normalise with batch statistics. Writes y, mean[C], the biased
// variance var[C] and invstd[C] = 1/sqrt(var + eps).
void batchnorm2d_forward_train(const BatchNormShape& s, const float* x, const float* gamma,
                               const float* beta, float eps, float* y, float* mean, float* var,
                               float* invstd);
// Eval: normalise with the given statistics (running_mean, invstd from running_var).
void batchnorm2d_forward_eval(const BatchNormShape& s, const float* x, const float* gamma,
                              const float* beta, const float* mean, const float* invstd, float* y);
// invstd[c] = 1/sqrt(var[c] + eps).
void batchnorm_invstd(int64_t channels, const float* var, float eps, float* invstd);
// PyTorch's running update: stat = (1-m) stat + m batch_stat, with the
// unbiased batch variance (var * count / (count - 1)).
void batchnorm_update_running(int64_t channels, int64_t count, float momentum, const float* mean,
                              const float* var, float* running_mean, float* running_var);
// dgamma/dbeta are accumulated. dx (overwritten, may be null): with batch
// statistics (training) the mean and variance depend on x and contribute;
// with fixed statistics (eval) dx = dy * gamma * invstd.
void batchnorm2d_backward(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                          const float* invstd, const float* gamma, bool batch_statistics, float* dx,
                          float* dgamma, float* dbeta);

}  // namespace pd::cpu
