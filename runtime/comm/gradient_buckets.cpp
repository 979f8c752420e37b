#include "runtime/comm/gradient_buckets.h"

#include "core/error.h"

namespace pd {

GradientBuckets::GradientBuckets(Transport& transport, std::shared_ptr<CommGroup> group,
                                 std::vector<Tensor> grads, size_t bucket_bytes, ReduceOp op)
    : transport_(transport), group_(std::move(group)), grads_(std::move(grads)), op_(op) {
  PD_CHECK(group_ != nullptr);
  bucket_of_.resize(grads_.size());
  ready_.assign(grads_.size(), 0);
  size_t bytes_in_last = 0;
  for (size_t i = 0; i < grads_.size(); ++i) {
    const size_t b = grads_[i].nbytes();
    if (buckets_.empty() || bytes_in_last + b > bucket_bytes) {
      buckets_.emplace_back();
      bytes_in_last = 0;
    }
    buckets_.back().grads.push_back(i);
    bytes_in_last += b;
    bucket_of_[i] = buckets_.size() - 1;
  }
  for (auto& bk : buckets_) bk.missing = bk.grads.size();
}

void GradientBuckets::mark_ready(size_t i) {
  PD_CHECK(i < grads_.size(), "gradient ", i, " of ", grads_.size());
  PD_CHECK(!ready_[i], "gradient ", i, " marked ready twice in one round");
  ready_[i] = 1;
  --buckets_[bucket_of_[i]].missing;
  start_ready_buckets();
}

void GradientBuckets::start_ready_buckets() {
  while (next_to_start_ < buckets_.size() && buckets_[next_to_start_].missing == 0) {
    Bucket& bk = buckets_[next_to_start_++];
    std::vector<Tensor> ts;
    for (size_t i : bk.grads) ts.push_back(grads_[i]);
    bk.request = transport_.iall_reduce(*group_, std::move(ts), op_);
  }
}

void GradientBuckets::wait(double timeout_s) {
  for (auto& bk : buckets_) bk.missing = 0;  // whatever was not marked is final now
  start_ready_buckets();
  for (auto& bk : buckets_) bk.request.wait(timeout_s);
  for (auto& bk : buckets_) {
    bk.missing = bk.grads.size();
    bk.request = Request{};
  }
  ready_.assign(grads_.size(), 0);
  next_to_start_ = 0;
}

}  // namespace pd
