#include "core/loss.h"

#include <cmath>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/error.h"

namespace pd {

LossResult softmax_cross_entropy(const Tensor& logits, const Tensor& labels, bool want_grad) {
  PD_CHECK(logits.ndim() >= 1, "softmax_cross_entropy: logits are a scalar");
  const int64_t C = logits.dim(-1);
  const int64_t rows = C > 0 ? logits.numel() / C : 0;
  if (labels.numel() != rows)
    throw UserError(cat("softmax_cross_entropy: ", rows, " rows of logits ", shape_str(logits.shape()),
                        " but ", labels.numel(), " labels ", shape_str(labels.shape())));
  const float* z = logits.f32();
  const int32_t* t = labels.data<int32_t>();
  for (int64_t r = 0; r < rows; ++r)
    if (t[r] < 0 || t[r] >= C)
      throw UserError(cat("softmax_cross_entropy: label ", t[r], " at row ", r, " is outside [0, ", C, ")"));

  LossResult out;
  out.count = rows;
  if (want_grad) out.grad = Tensor::empty(logits.shape());
  float* g = want_grad ? out.grad.f32() : nullptr;
  // Per-row results are summed afterwards in row order: the total does not
  // depend on how rows were split over threads.
  std::vector<double> row_loss(static_cast<size_t>(rows));
  std::vector<uint8_t> row_correct(static_cast<size_t>(rows));
  const float inv_rows = rows ? 1.0f / static_cast<float>(rows) : 0.0f;
#pragma omp parallel for schedule(static) if (rows * C >= cpu::kParallelMinElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* zr = z + r * C;
    int64_t best = 0;
    for (int64_t c = 1; c < C; ++c)
      if (zr[c] > zr[best]) best = c;
    const float zmax = zr[best];
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) sum += std::exp(static_cast<double>(zr[c] - zmax));
    const double log_sum = std::log(sum);
    row_loss[r] = log_sum - static_cast<double>(zr[t[r]] - zmax);
    row_correct[r] = best == t[r];
    if (g) {
      float* gr = g + r * C;
      for (int64_t c = 0; c < C; ++c)
        gr[c] = static_cast<float>(std::exp(static_cast<double>(zr[c] - zmax) - log_sum)) * inv_rows;
      gr[t[r]] -= inv_rows;
    }
  }
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    total += row_loss[r];
    out.correct += row_correct[r];
  }
  out.loss = rows ? static_cast<float>(total / static_cast<double>(rows)) : 0.0f;
  return out;
}

}  // namespace pd
