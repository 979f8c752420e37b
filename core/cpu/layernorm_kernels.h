#pragma once
// Layer normalisation over the last dimension of a [rows, D] matrix.
#include <cstdint>

namespace pd::cpu {

// y = (x - mean) * rstd * w + b per row; saves mean and rstd [rows].
void layernorm_forward(const float* x, const float* w, const float* b, float* y, float* mean,
                       float* rstd, int64_t rows, int64_t D, float eps);

// Accumulates dw, db; writes dx when non-null.
void layernorm_backward(const float* x, const float* w, const float* mean, const float* rstd,
                        const float* dy, float* dx, float* dw, float* db, int64_t rows, int64_t D);
// Its halves: dx only (overwritten); dw, db only (accumulated).
void layernorm_backward_input(const float* x, const float* w, const float* mean, const float* rstd,
                              const float* dy, float* dx, int64_t rows, int64_t D);
void layernorm_backward_params(const float* x, const float* mean, const float* rstd, const float* dy,
                               float* dw, float* db, int64_t rows, int64_t D);

}  // namespace pd::cpu
