#pragma once
// GradientBuckets: all-reduce a stage's parameter gradients among its
// replicas in buckets while backward is still running (as PyTorch DDP does).
//
// The executor lists the gradient tensors in the order backward finishes
// them (last layer first) and calls mark_ready(i) as each is final; a
// bucket's all-reduce starts once all its gradients are ready, and buckets
// start strictly in bucket order, so every replica issues the same
// all-reduces in the same order whatever its timing. wait() before the
// optimizer step.
#include <memory>
#include <vector>

#include "runtime/comm/transport.h"

namespace pd {

class GradientBuckets {
 public:
  // Buckets are consecutive gradients of at most bucket_bytes (a larger
  // gradient gets a bucket of its own).
  GradientBuckets(Transport& transport, std::shared_ptr<CommGroup> group, std::vector<Tensor> grads,
                  size_t bucket_bytes = 25u << 20, ReduceOp op = ReduceOp::Average);

  void mark_ready(size_t grad_index);
  // Starts what has not started, waits for every bucket, and re-arms for
  // the next backward round.
  void wait(double timeout_s = -1);

  size_t bucket_count() const { return buckets_.size(); }
  size_t buckets_started() const { return next_to_start_; }

 private:
  struct Bucket {
    std::vector<size_t> grads;
    size_t missing = 0;
    Request request;
  };
  void start_ready_buckets();

  Transport& transport_;
  std::shared_ptr<CommGroup> group_;
  std::vector<Tensor> grads_;
  ReduceOp op_;
  std::vector<Bucket> buckets_;
  std::vector<size_t> bucket_of_;
  std::vector<char> ready_;
  size_t next_to_start_ = 0;
};

}  // namespace pd
