#pragma once
// Softmax cross-entropy over rows of logits on the host: the CPU's
// DeviceOps::softmax_cross_entropy (core/device_ops.h documents it).
#include <cstdint>

namespace pd::cpu {

// grad (may be null) = (softmax - onehot) * grad_scale per row; *loss_sum =
// the rows' losses summed in row order (in double), *correct = rows whose
// first argmax is the label. Rows run in parallel; the sums do not depend
// on how they were split. Throws RuntimeFailure on a label outside
// [0, classes) before writing anything.
void softmax_cross_entropy(int64_t rows, int64_t classes, const float* logits, const int32_t* labels,
                           float grad_scale, float* grad, double* loss_sum, int64_t* correct);

}  // namespace pd::cpu
