#pragma once
// GELU, tanh form: gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
#include <cstdint>

namespace pd::cpu {

void gelu_forward(const float* x, float* y, int64_t n);
// dx = dy * gelu'(x).
void gelu_backward(const float* x, const float* dy, float* dx, int64_t n);

}  // namespace pd::cpu
