#pragma once
// Softmax cross-entropy over the last dimension of the logits.
#include "core/tensor.h"

namespace pd {

struct LossResult {
  float loss = 0;         // mean over all rows
  Tensor grad;            // d(mean loss)/d logits, same shape as logits
  int64_t correct = 0;    // rows whose argmax equals the label
  int64_t count = 0;      // rows
};

// logits [..., C] (F32, or BF16: then grad is BF16 too), labels [...] (I32).
// grad is scaled by 1/rows.
LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels, bool want_grad = true);

// The same with the gradient, when the caller hands over the logits and
// nothing else holds their storage (no view, no layer context), written
// over them: a language model's logits and their gradient are its largest
// tensors, and this keeps one of them, not two. Otherwise as above.
LossResult softmax_cross_entropy(Tensor&& logits, const Tensor& labels);

}  // namespace pd
