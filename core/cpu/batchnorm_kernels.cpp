#include "core/cpu/batchnorm_kernels.h"

#include "core/cpu/parallel.h"
#include <cmath>

namespace pd::cpu {

void batchnorm2d_forward_train(const BatchNormShape& s, const float* x, const float* gamma,
                               const float* beta, float eps, float* y, float* mean, float* var,
                               float* invstd) {
  const int64_t N = s.batch, C = s.channels, P = s.plane;
  const double inv_count = 1.0 / static_cast<double>(s.count());
#pragma omp parallel for schedule(static) if (s.batch * C * P >= kParallelMinElements)
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0;
    for (int64_t i = 0; i < N; ++i) {
      const float* in = x + (i * C + c) * P;
      for (int64_t p = 0; p < P; ++p) sum += in[p];
    }
    const double mu = sum * inv_count;
    double sq = 0;  // two-pass variance: no cancellation
    for (int64_t i = 0; i < N; ++i) {
      const float* in = x + (i * C + c) * P;
      for (int64_t p = 0; p < P; ++p) {
        const double d = in[p] - mu;
        sq += d * d;
      }
    }
    const double v = sq * inv_count;
    const float is = static_cast<float>(1.0 / std::sqrt(v + eps));
    mean[c] = static_cast<float>(mu);
    var[c] = static_cast<float>(v);
    invstd[c] = is;
    const float a = gamma[c] * is, b = beta[c] - static_cast<float>(mu) * a;
    for (int64_t i = 0; i < N; ++i) {
      const float* in = x + (i * C + c) * P;
      float* out = y + (i * C + c) * P;
      for (int64_t p = 0; p < P; ++p) out[p] = in[p] * a + b;
    }
  }
}

void batchnorm2d_forward_eval(const BatchNormShape& s, const float* x, const float* gamma,
                              const float* beta, const float* mean, const float* invstd, float* y) {
  const int64_t N = s.batch, C = s.channels, P = s.plane;
#pragma omp parallel for collapse(2) schedule(static) if (s.batch * C * P >= kParallelMinElements)
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < C; ++c) {
      const float a = gamma[c] * invstd[c], b = beta[c] - mean[c] * a;
      const float* in = x + (i * C + c) * P;
      float* out = y + (i * C + c) * P;
      for (int64_t p = 0; p < P; ++p) out[p] = in[p] * a + b;
    }
}

void batchnorm_invstd(int64_t channels, const float* var, float eps, float* invstd) {
  for (int64_t c = 0; c < channels; ++c)
    invstd[c] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(var[c]) + eps));
}

void batchnorm_update_running(int64_t channels, int64_t count, float momentum, const float* mean,
                              const float* var, float* running_mean, float* running_var) {
  const double unbias = static_cast<double>(count) / static_cast<double>(count - 1);
  for (int64_t c = 0; c < channels; ++c) {
    running_mean[c] = (1.0f - momentum) * running_mean[c] + momentum * mean[c];
    running_var[c] = (1.0f - momentum) * running_var[c] + momentum * static_cast<float>(var[c] * unbias);
  }
}

void batchnorm2d_backward(const BatchNormShape& s, const float* x, const float* dy, const float* mean,
                          const float* invstd, const float* gamma, bool batch_statistics, float* dx,
                          float* dgamma, float* dbeta) {
  const int64_t N = s.batch, C = s.channels, P = s.plane;
  const double inv_count = 1.0 / static_cast<double>(s.count());
#pragma omp parallel for schedule(static) if (s.batch * C * P >= kParallelMinElements)
  for (int64_t c = 0; c < C; ++c) {
    const float mu = mean[c], is = invstd[c];
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t i = 0; i < N; ++i) {
      const float* in = x + (i * C + c) * P;
      const float* g = dy + (i * C + c) * P;
      for (int64_t p = 0; p < P; ++p) {
        sum_dy += g[p];
        sum_dy_xhat += static_cast<double>(g[p]) * ((in[p] - mu) * is);
      }
    }
    dgamma[c] += static_cast<float>(sum_dy_xhat);
    dbeta[c] += static_cast<float>(sum_dy);
    if (!dx) continue;
    const float k = gamma[c] * is;
    // dx = k * (dy - mean(dy) - xhat * mean(dy * xhat)) with batch statistics.
    const float m_dy = batch_statistics ? static_cast<float>(sum_dy * inv_count) : 0.0f;
    const float m_dyx = batch_statistics ? static_cast<float>(sum_dy_xhat * inv_count) : 0.0f;
    for (int64_t i = 0; i < N; ++i) {
      const float* in = x + (i * C + c) * P;
      const float* g = dy + (i * C + c) * P;
      float* out = dx + (i * C + c) * P;
      for (int64_t p = 0; p < P; ++p) out[p] = k * (g[p] - m_dy - (in[p] - mu) * is * m_dyx);
    }
  }
}

}  // namespace pd::cpu
