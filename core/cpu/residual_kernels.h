#pragma once
// y = a + b elementwise (residual connections, gradient merges).
#include <cstdint>

namespace pd::cpu {

void residual_add(const float* a, const float* b, float* y, int64_t n);

}  // namespace pd::cpu
