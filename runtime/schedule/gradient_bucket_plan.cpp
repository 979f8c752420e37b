#include "runtime/schedule/gradient_bucket_plan.h"

namespace pd {

std::vector<GradientBucket> plan_gradient_buckets(const std::vector<std::vector<size_t>>& grad_bytes_by_layer,
                                                  size_t bucket_bytes) {
  std::vector<GradientBucket> plan;
  GradientBucket open;
  for (size_t pos = 0; pos < grad_bytes_by_layer.size(); ++pos) {
    if (grad_bytes_by_layer[pos].empty()) continue;
    open.layers.push_back(pos);
    for (size_t b : grad_bytes_by_layer[pos]) open.bytes += b;
    if (open.bytes >= bucket_bytes) {
      plan.push_back(std::move(open));
      open = GradientBucket{};
    }
  }
  if (!open.layers.empty()) plan.push_back(std::move(open));
  return plan;
}

}  // namespace pd
