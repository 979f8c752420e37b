#pragma once
// Which layers' gradients each all-reduce of a replicated stage's round
// carries: the runtime sends them (runtime/comm/gradient_buckets.h) and
// the simulator prices them (runtime/simulator) from the same plan.
//
// Buckets hold whole layers in the order backward finishes them (last
// layer first). A bucket closes after the layer that brings it to at least
// bucket_bytes, so each bucket is one all-reduce big enough to amortize its
// latency, and the last takes what is left.
#include <cstddef>
#include <vector>

namespace pd {

constexpr size_t kDefaultGradientBucketBytes = size_t{4} << 20;

struct GradientBucket {
  std::vector<size_t> layers;  // positions in backward order, ascending
  size_t bytes = 0;
};

// The buckets for layers whose gradients have these sizes, per layer in
// backward order (an empty list: a layer without parameters, in no bucket).
std::vector<GradientBucket> plan_gradient_buckets(const std::vector<std::vector<size_t>>& grad_bytes_by_layer,
                                                  size_t bucket_bytes);

}  // namespace pd
