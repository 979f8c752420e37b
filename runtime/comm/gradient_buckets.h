#pragma once
// GradientBuckets: all-reduce a replicated stage's parameter gradients in
// buckets while backward is still running (as PyTorch DDP does). The
// executor (runtime/executor.cpp) runs it.
//
// The buckets are runtime/schedule/gradient_bucket_plan.h's (whole layers
// in backward order, each at least bucket_bytes). The executor reports
// each layer as its backward is done (layer_done); a bucket's all-reduce
// starts once all its layers are done, and buckets start strictly in
// bucket order, so every replica issues the same all-reduces in the same
// order whatever its timing. end_round() before the optimizer step.
//
// The reduction is a Sum: the optimizer step divides by the number of
// gradients summed (replicas times microbatches) in one place.
#include <cstddef>
#include <memory>
#include <vector>

#include "runtime/comm/transport.h"
#include "runtime/schedule/gradient_bucket_plan.h"

namespace pd {

class GradientBuckets {
 public:
  static constexpr size_t kDefaultBucketBytes = kDefaultGradientBucketBytes;

  // grads_by_layer: the gradient tensors of each layer in backward order;
  // they are all-reduced in place.
  GradientBuckets(Transport& transport, std::shared_ptr<CommGroup> group,
                  std::vector<std::vector<Tensor>> grads_by_layer, size_t bucket_bytes = kDefaultBucketBytes,
                  ReduceOp op = ReduceOp::Sum);

  // Backward finished the layer at this position (backward order).
  void layer_done(size_t position);
  // Starts every bucket not started yet this round.
  void start_all();
  // Whether every bucket of the round has been started and is done.
  bool test();
  // start_all(), then waits for every bucket of the round.
  void wait(double timeout_s = -1);
  // wait(), then re-arms for the next round.
  void end_round(double timeout_s = -1);

  const std::vector<GradientBucket>& buckets() const { return plan_; }
  size_t bucket_count() const { return plan_.size(); }
  size_t buckets_started() const { return next_to_start_; }

 private:
  void start_ready_buckets();
  void rearm();

  Transport& transport_;
  std::shared_ptr<CommGroup> group_;
  std::vector<std::vector<Tensor>> grads_by_layer_;
  ReduceOp op_;
  std::vector<GradientBucket> plan_;
  std::vector<int> bucket_of_layer_;    // -1: no parameters
  std::vector<size_t> layers_missing_;  // per bucket, this round
  std::vector<char> layer_done_;
  std::vector<Request> requests_;
  size_t next_to_start_ = 0;
};

}  // namespace pd
