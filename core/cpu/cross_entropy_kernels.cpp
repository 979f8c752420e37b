#include "core/cpu/cross_entropy_kernels.h"

#include <cmath>
#include <vector>

#include "core/cpu/parallel.h"
#include "core/error.h"

namespace pd::cpu {

void softmax_cross_entropy(int64_t rows, int64_t C, const float* z, const int32_t* t, float grad_scale, float* g,
                           double* loss_sum, int64_t* correct) {
  for (int64_t r = 0; r < rows; ++r)
    if (t[r] < 0 || t[r] >= C)
      throw RuntimeFailure(cat("softmax_cross_entropy: label ", t[r], " at row ", r, " is outside [0, ", C, ")"));
  std::vector<double> row_loss(static_cast<size_t>(rows));
  std::vector<uint8_t> row_correct(static_cast<size_t>(rows));
#pragma omp parallel for schedule(static) if (rows * C >= kParallelMinElements)
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
        gr[c] = static_cast<float>(std::exp(static_cast<double>(zr[c] - zmax) - log_sum)) * grad_scale;
      gr[t[r]] -= grad_scale;
    }
  }
  double total = 0;
  int64_t right = 0;
  for (int64_t r = 0; r < rows; ++r) {
    total += row_loss[r];
    right += row_correct[r];
  }
  *loss_sum = total;
  *correct = right;
}

}  // namespace pd::cpu
