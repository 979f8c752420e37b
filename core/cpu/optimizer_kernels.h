#pragma once
// SGD and Adam updates on host memory: the CPU table's sgd_step_multi and
// adam_step_multi (core/device_ops.h has the contract and the rules).
#include <cstdint>

namespace pd::cpu {

void sgd_step_multi(int64_t count, const int64_t* sizes, const float* const* params_in, float* const* params_out,
                    const float* const* grads, float* const* bufs, float lr, float momentum, float weight_decay,
                    bool nesterov);
void adam_step_multi(int64_t count, const int64_t* sizes, const float* const* params_in, float* const* params_out,
                     const float* const* grads, float* const* m, float* const* v, float lr, float beta1, float beta2,
                     float eps, float weight_decay, bool decoupled, int64_t step_count);
void sum_squares_multi(int64_t count, const int64_t* sizes, const float* const* xs, double* sums);

}  // namespace pd::cpu
