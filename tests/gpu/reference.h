#pragma once
// Naive CPU references for the GPU kernels: plain loops, double accumulation,
// written from the definitions (not from the CUDA code) so that a shared
// misunderstanding would have to be made twice.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/device_ops.h"
#include "core/rng.h"

namespace pd::ref {

using V = std::vector<float>;
using D = std::vector<double>;

// Row-major C = alpha op(A) op(B) + beta C.
inline D gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, double alpha, const V& A, int64_t lda, const V& B,
              int64_t ldb, double beta, const V& C, int64_t ldc) {
  D out(C.begin(), C.end());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        double a = ta ? A[k * lda + i] : A[i * lda + k];
        double b = tb ? B[j * ldb + k] : B[k * ldb + j];
        acc += a * b;
      }
      out[i * ldc + j] = alpha * acc + beta * C[i * ldc + j];
    }
  return out;
}

// Input cell of output (oh, ow) and kernel tap (kh, kw); false in the padding.
inline bool conv_input(const Conv2dGeometry& g, int64_t oh, int64_t ow, int64_t kh, int64_t kw, int64_t* ih,
                       int64_t* iw) {
  *ih = oh * g.stride_h - g.pad.top + kh;
  *iw = ow * g.stride_w - g.pad.left + kw;
  return *ih >= 0 && *ih < g.in_h && *iw >= 0 && *iw < g.in_w;
}

// Output channel o reads input channels [group * C/groups, (group + 1) * C/groups).
inline D conv2d_forward(const Conv2dGeometry& g, const V& x, const V& w, const V& bias) {
  const int64_t OH = g.out_h(), OW = g.out_w(), Cg = g.in_channels / g.groups, Og = g.out_channels / g.groups;
  D y(g.batch * g.out_channels * OH * OW);
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bias.empty() ? 0.0 : bias[o];
          for (int64_t cg = 0; cg < Cg; ++cg)
            for (int64_t kh = 0; kh < g.kernel_h; ++kh)
              for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
                int64_t ih, iw;
                if (!conv_input(g, oh, ow, kh, kw, &ih, &iw)) continue;
                const int64_t c = o / Og * Cg + cg;
                acc += double(x[((n * g.in_channels + c) * g.in_h + ih) * g.in_w + iw]) *
                       w[((o * Cg + cg) * g.kernel_h + kh) * g.kernel_w + kw];
              }
          y[((n * g.out_channels + o) * OH + oh) * OW + ow] = acc;
        }
  return y;
}

// dx, dw, db of the convolution for upstream gradient dy.
struct ConvGrads {
  D dx, dw, db;
};
inline ConvGrads conv2d_backward(const Conv2dGeometry& g, const V& x, const V& w, const V& dy) {
  const int64_t OH = g.out_h(), OW = g.out_w(), Cg = g.in_channels / g.groups, Og = g.out_channels / g.groups;
  ConvGrads r{D(x.size()), D(w.size()), D(g.out_channels)};
  for (int64_t n = 0; n < g.batch; ++n)
    for (int64_t o = 0; o < g.out_channels; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double d = dy[((n * g.out_channels + o) * OH + oh) * OW + ow];
          r.db[o] += d;
          for (int64_t cg = 0; cg < Cg; ++cg)
            for (int64_t kh = 0; kh < g.kernel_h; ++kh)
              for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
                int64_t ih, iw;
                if (!conv_input(g, oh, ow, kh, kw, &ih, &iw)) continue;
                const int64_t c = o / Og * Cg + cg;
                int64_t xi = ((n * g.in_channels + c) * g.in_h + ih) * g.in_w + iw;
                int64_t wi = ((o * Cg + cg) * g.kernel_h + kh) * g.kernel_w + kw;
                r.dx[xi] += d * w[wi];
                r.dw[wi] += d * x[xi];
              }
        }
  return r;
}

// The cells of output (oh, ow)'s window: input cells, and the divisor of
// its average (the window's cells inside the padded input when padding
// counts - a ceil-mode window may overhang it - else its input cells).
struct PoolCells {
  std::vector<int64_t> inside;  // in-plane indices, row-major window order
  int64_t divisor = 0;
};
inline PoolCells pool_cells(const Pool2dGeometry& g, int64_t oh, int64_t ow) {
  PoolCells r;
  int64_t padded = 0;
  for (int64_t kh = 0; kh < g.kernel_h; ++kh)
    for (int64_t kw = 0; kw < g.kernel_w; ++kw) {
      const int64_t ih = oh * g.stride_h - g.pad.top + kh, iw = ow * g.stride_w - g.pad.left + kw;
      if (ih < g.in_h + g.pad.bottom && iw < g.in_w + g.pad.right) ++padded;
      if (ih >= 0 && ih < g.in_h && iw >= 0 && iw < g.in_w) r.inside.push_back(ih * g.in_w + iw);
    }
  r.divisor = g.count_include_pad ? padded : static_cast<int64_t>(r.inside.size());
  return r;
}

// Pooling forward; for max, argmax[i] is the input index feeding output i.
inline D pool2d_forward(PoolKind kind, const Pool2dGeometry& g, const V& x, std::vector<int64_t>* argmax = nullptr) {
  int64_t OH = g.out_h(), OW = g.out_w();
  D y(g.batch * g.channels * OH * OW);
  if (argmax) argmax->assign(y.size(), -1);
  for (int64_t nc = 0; nc < g.batch * g.channels; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double best = -std::numeric_limits<double>::infinity(), sum = 0;
        int64_t best_i = -1;
        const PoolCells cells = pool_cells(g, oh, ow);
        for (int64_t at : cells.inside) {
          int64_t xi = nc * g.in_h * g.in_w + at;
          sum += x[xi];
          if (x[xi] > best) {
            best = x[xi];
            best_i = xi;
          }
        }
        int64_t yi = (nc * OH + oh) * OW + ow;
        y[yi] = kind == PoolKind::Max ? best : sum / double(cells.divisor);
        if (argmax) (*argmax)[yi] = best_i;
      }
  return y;
}

inline D pool2d_backward(PoolKind kind, const Pool2dGeometry& g, const V& x, const V& dy) {
  int64_t OH = g.out_h(), OW = g.out_w();
  D dx(x.size());
  std::vector<int64_t> am;
  pool2d_forward(kind, g, x, &am);
  for (int64_t nc = 0; nc < g.batch * g.channels; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        int64_t yi = (nc * OH + oh) * OW + ow;
        if (kind == PoolKind::Max) {
          dx[am[yi]] += dy[yi];
          continue;
        }
        const PoolCells cells = pool_cells(g, oh, ow);
        for (int64_t at : cells.inside) dx[nc * g.in_h * g.in_w + at] += dy[yi] / cells.divisor;
      }
  return dx;
}

// Batch norm over (N, H, W) per channel, training mode.
struct BatchNormForward {
  D y, mean, invstd, running_mean, running_var;
};
inline BatchNormForward batchnorm_train(int64_t N, int64_t C, int64_t HW, const V& x, const V& gamma, const V& beta,
                                        double momentum, double eps, const V& rm, const V& rv) {
  BatchNormForward r{D(x.size()), D(C), D(C), D(C), D(C)};
  double m = double(N * HW);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) s += x[(n * C + c) * HW + i];
    double mean = s / m;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) q += std::pow(x[(n * C + c) * HW + i] - mean, 2);
    double var = q / m;
    double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        int64_t k = (n * C + c) * HW + i;
        r.y[k] = (x[k] - mean) * inv * gamma[c] + beta[c];
      }
    r.mean[c] = mean;
    r.invstd[c] = inv;
    r.running_mean[c] = (1 - momentum) * rm[c] + momentum * mean;
    r.running_var[c] = (1 - momentum) * rv[c] + momentum * q / (m - 1);  // unbiased
  }
  return r;
}

inline D batchnorm_eval(int64_t N, int64_t C, int64_t HW, const V& x, const V& gamma, const V& beta, const V& rm,
                        const V& rv, double eps) {
  D y(x.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < HW; ++i) {
        int64_t k = (n * C + c) * HW + i;
        y[k] = (x[k] - rm[c]) / std::sqrt(rv[c] + eps) * gamma[c] + beta[c];
      }
  return y;
}

struct NormGrads {
  D dx, dgamma, dbeta;
};
inline NormGrads batchnorm_backward(int64_t N, int64_t C, int64_t HW, const V& x, const V& dy, const V& gamma,
                                    double eps) {
  NormGrads r{D(x.size()), D(C), D(C)};
  double m = double(N * HW);
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) s += x[(n * C + c) * HW + i];
    double mean = s / m;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) q += std::pow(x[(n * C + c) * HW + i] - mean, 2);
    double inv = 1.0 / std::sqrt(q / m + eps);
    double sdy = 0, sdyx = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        int64_t k = (n * C + c) * HW + i;
        sdy += dy[k];
        sdyx += dy[k] * (x[k] - mean) * inv;
      }
    r.dgamma[c] = sdyx;
    r.dbeta[c] = sdy;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) {
        int64_t k = (n * C + c) * HW + i;
        double xhat = (x[k] - mean) * inv;
        r.dx[k] = gamma[c] * inv * (dy[k] - sdy / m - xhat * sdyx / m);
      }
  }
  return r;
}

struct LayerNormForward {
  D y, mean, rstd;
};
inline LayerNormForward layernorm(int64_t rows, int64_t dim, const V& x, const V& g, const V& b, double eps) {
  LayerNormForward r{D(x.size()), D(rows), D(rows)};
  for (int64_t i = 0; i < rows; ++i) {
    double s = 0, q = 0;
    for (int64_t j = 0; j < dim; ++j) s += x[i * dim + j];
    double mean = s / dim;
    for (int64_t j = 0; j < dim; ++j) q += std::pow(x[i * dim + j] - mean, 2);
    double rstd = 1.0 / std::sqrt(q / dim + eps);
    for (int64_t j = 0; j < dim; ++j) r.y[i * dim + j] = (x[i * dim + j] - mean) * rstd * g[j] + b[j];
    r.mean[i] = mean;
    r.rstd[i] = rstd;
  }
  return r;
}

inline NormGrads layernorm_backward(int64_t rows, int64_t dim, const V& x, const V& dy, const V& g, double eps) {
  NormGrads r{D(x.size()), D(dim), D(dim)};
  LayerNormForward f = layernorm(rows, dim, x, g, V(dim, 0.0f), eps);
  for (int64_t i = 0; i < rows; ++i) {
    double a = 0, b = 0;
    for (int64_t j = 0; j < dim; ++j) {
      double xhat = (x[i * dim + j] - f.mean[i]) * f.rstd[i];
      double gy = double(dy[i * dim + j]) * g[j];
      a += gy;
      b += gy * xhat;
      r.dgamma[j] += dy[i * dim + j] * xhat;
      r.dbeta[j] += dy[i * dim + j];
    }
    for (int64_t j = 0; j < dim; ++j) {
      double xhat = (x[i * dim + j] - f.mean[i]) * f.rstd[i];
      r.dx[i * dim + j] = f.rstd[i] * (double(dy[i * dim + j]) * g[j] - a / dim - xhat * b / dim);
    }
  }
  return r;
}

struct CrossEntropy {
  double loss_sum = 0;
  int64_t correct = 0;
  D grad;
};
inline CrossEntropy softmax_cross_entropy(int64_t rows, int64_t C, const V& logits, const std::vector<int32_t>& labels,
                                          double grad_scale) {
  CrossEntropy r;
  r.grad.resize(logits.size());
  for (int64_t i = 0; i < rows; ++i) {
    const float* x = &logits[i * C];
    int64_t am = 0;
    for (int64_t j = 1; j < C; ++j)
      if (x[j] > x[am]) am = j;
    double s = 0;
    for (int64_t j = 0; j < C; ++j) s += std::exp(double(x[j]) - x[am]);
    r.loss_sum += std::log(s) - (double(x[labels[i]]) - x[am]);
    r.correct += am == labels[i];
    for (int64_t j = 0; j < C; ++j)
      r.grad[i * C + j] = (std::exp(double(x[j]) - x[am]) / s - (j == labels[i])) * grad_scale;
  }
  return r;
}

inline D causal_softmax(int64_t batch, int64_t T, double scale, const V& s) {
  D p(s.size());
  for (int64_t r = 0; r < batch * T; ++r) {
    int64_t t = r % T;
    double mx = -1e300, sum = 0;
    for (int64_t j = 0; j <= t; ++j) mx = std::max(mx, scale * s[r * T + j]);
    for (int64_t j = 0; j <= t; ++j) sum += std::exp(scale * s[r * T + j] - mx);
    for (int64_t j = 0; j < T; ++j) p[r * T + j] = j <= t ? std::exp(scale * s[r * T + j] - mx) / sum : 0.0;
  }
  return p;
}

inline D causal_softmax_backward(int64_t batch, int64_t T, double scale, const V& p, const V& dp) {
  D ds(p.size());
  for (int64_t r = 0; r < batch * T; ++r) {
    int64_t t = r % T;
    double dot = 0;
    for (int64_t j = 0; j <= t; ++j) dot += double(dp[r * T + j]) * p[r * T + j];
    for (int64_t j = 0; j <= t; ++j) ds[r * T + j] = scale * p[r * T + j] * (dp[r * T + j] - dot);
  }
  return ds;
}

inline double gelu(double x) {
  return 0.5 * x * (1 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
inline double gelu_grad(double x) {
  double u = std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x);
  double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * std::sqrt(2.0 / M_PI) * (1 + 3 * 0.044715 * x * x);
}

// The CPU's dropout mask definition (docs/design.md §3, core/device_ops.h).
inline bool dropout_keep(const DropoutKey& k, float p, uint64_t i) {
  return CounterRng(k.seed, k.layer_index, k.minibatch_id).uniform(i) >= p;
}

}  // namespace pd::ref
