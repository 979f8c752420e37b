#pragma once
// Elementwise kernels on raw host pointers (static OpenMP split: each
// element is written by exactly one thread).
#include <cstdint>

namespace pd::cpu {

void relu_forward(int64_t n, const float* x, float* y);
// dx = dy where the forward output y was positive, else 0.
void relu_backward(int64_t n, const float* y, const float* dy, float* dx);
// y = max(a + b, 0): the residual join of ResNet blocks.
void add_relu_forward(int64_t n, const float* a, const float* b, float* y);
// a += b.
void add_into(int64_t n, float* a, const float* b);

}  // namespace pd::cpu
