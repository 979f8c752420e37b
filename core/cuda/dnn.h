#pragma once
// cuDNN-backed convolution, pooling and batch norm (contracts in
// core/device_ops.h). Convolution algorithms are chosen once per shape by
// cuDNN's heuristics and cached; in deterministic mode only algorithms
// cuDNN reports as deterministic are eligible. cuDNN pads each axis
// symmetrically: convolutions with uneven pads run on a zero-padded copy
// of x, and pools with uneven pads or in ceil mode on window.cu's kernels.
#include <cstddef>
#include <cstdint>

#include "core/device_ops.h"

namespace pd::cuda {

// Under BF16 (the caller's StepInfo::precision) in TF32 tensor-core math,
// exact on bf16-valued operands.
void conv2d_forward(Precision p, const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y);
void conv2d_backward_data(Precision p, const Conv2dGeometry& g, const float* w, const float* dy, float* dx);
void conv2d_backward_params_accum(Precision p, const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                                  float* dbias);

void pool2d_forward(PoolKind kind, const Pool2dGeometry& g, const float* x, float* y);
void pool2d_backward(PoolKind kind, const Pool2dGeometry& g, const float* x, const float* y, const float* dy,
                     float* dx);

void batchnorm_forward_train(int64_t n, int64_t c, int64_t h, int64_t w, const float* x, const float* gamma,
                             const float* beta, float momentum, float eps, float* running_mean, float* running_var,
                             float* save_mean, float* save_invstd, float* y);
void batchnorm_forward_eval(int64_t n, int64_t c, int64_t h, int64_t w, const float* x, const float* gamma,
                            const float* beta, const float* running_mean, const float* running_var, float eps,
                            float* y);
void batchnorm_backward(int64_t n, int64_t c, int64_t h, int64_t w, const float* x, const float* dy,
                        const float* gamma, const float* save_mean, const float* save_invstd, float eps, float* dx,
                        float* dgamma_accum, float* dbeta_accum);

// Number of distinct convolution shapes whose algorithms are cached (tests).
size_t conv_plan_count();
void clear_conv_plans();

}  // namespace pd::cuda
