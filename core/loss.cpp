#include "core/loss.h"

#include "core/device_ops.h"
#include "core/error.h"

namespace pd {

// One path on every device: labels on the host are checked there (a bad
// label is the user's data: UserError) and copied to the logits' device
// when that is elsewhere; labels already on the device are checked by the
// kernel (RuntimeFailure). The backend sums the rows' losses in row order.
// bf16 logits (a last layer under bf16 storage, core/layer.h
// StepInfo::output_to_loss) give a bf16 gradient: the FP32 one rounded, as
// the range runner would round it.
namespace {

// grad: where the gradient goes (undefined: no gradient); may be the logits.
LossResult cross_entropy(const Tensor& logits, const Tensor& labels, Tensor grad) {
  PD_CHECK(logits.ndim() >= 1, "softmax_cross_entropy: logits are a scalar");
  const int64_t C = logits.dim(-1);
  const int64_t rows = C > 0 ? logits.numel() / C : 0;
  if (labels.numel() != rows)
    throw UserError(cat("softmax_cross_entropy: ", rows, " rows of logits ", shape_str(logits.shape()),
                        " but ", labels.numel(), " labels ", shape_str(labels.shape())));
  const Device dev = logits.device();
  Tensor t = labels;
  if (labels.device().is_cpu()) {
    const int32_t* h = labels.data<int32_t>();
    for (int64_t r = 0; r < rows; ++r)
      if (h[r] < 0 || h[r] >= C)
        throw UserError(cat("softmax_cross_entropy: label ", h[r], " at row ", r, " is outside [0, ", C, ")"));
  }
  if (labels.device() != dev) t = labels.to(dev);
  LossResult out;
  out.count = rows;
  const bool bf16 = logits.dtype() == DType::BF16;  // bf16 storage: so is the gradient
  const bool want_grad = grad.defined();
  out.grad = grad;
  if (rows == 0) return out;
  const float inv_rows = 1.0f / static_cast<float>(rows);
  double total = 0;
  const DeviceOps& ops = device_ops(dev);
  if (bf16)
    ops.softmax_cross_entropy_bf16(rows, C, logits.bf16(), t.data<int32_t>(), inv_rows,
                                   want_grad ? out.grad.bf16() : nullptr, &total, &out.correct);
  else
    ops.softmax_cross_entropy(rows, C, logits.f32(), t.data<int32_t>(), inv_rows,
                              want_grad ? out.grad.f32() : nullptr, &total, &out.correct);
  out.loss = static_cast<float>(total / static_cast<double>(rows));
  return out;
}

}  // namespace

LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels, bool want_grad) {
  return cross_entropy(logits, labels, want_grad ? Tensor::empty(logits.shape(), logits.dtype(), logits.device())
                                                 : Tensor());
}

LossResult softmax_cross_entropy(Tensor&& logits, const Tensor& labels) {
  // The kernels read a row before writing its gradient: the gradient may alias the logits.
  Tensor held = std::move(logits);
  if (!held.sole_owner() || (held.dtype() != DType::F32 && held.dtype() != DType::BF16))
    return softmax_cross_entropy(held, labels, true);
  return cross_entropy(held, labels, held);
}

}  // namespace pd
