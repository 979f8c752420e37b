#include "runtime/comm/gradient_buckets.h"

#include "core/error.h"

namespace pd {

namespace {
std::vector<std::vector<size_t>> bytes_of(const std::vector<std::vector<Tensor>>& grads_by_layer) {
  std::vector<std::vector<size_t>> bytes(grads_by_layer.size());
  for (size_t pos = 0; pos < grads_by_layer.size(); ++pos)
    for (const Tensor& t : grads_by_layer[pos]) bytes[pos].push_back(t.nbytes());
  return bytes;
}
}  // namespace

GradientBuckets::GradientBuckets(Transport& transport, std::shared_ptr<CommGroup> group,
                                 std::vector<std::vector<Tensor>> grads_by_layer, size_t bucket_bytes, ReduceOp op)
    : transport_(transport),
      group_(std::move(group)),
      grads_by_layer_(std::move(grads_by_layer)),
      op_(op),
      plan_(plan_gradient_buckets(bytes_of(grads_by_layer_), bucket_bytes)) {
  PD_CHECK(group_ != nullptr);
  bucket_of_layer_.assign(grads_by_layer_.size(), -1);
  for (size_t b = 0; b < plan_.size(); ++b)
    for (size_t pos : plan_[b].layers) bucket_of_layer_[pos] = static_cast<int>(b);
  requests_.resize(plan_.size());
  rearm();
}

void GradientBuckets::rearm() {
  layers_missing_.clear();
  for (const GradientBucket& bk : plan_) layers_missing_.push_back(bk.layers.size());
  layer_done_.assign(grads_by_layer_.size(), 0);
  for (Request& r : requests_) r = Request{};
  next_to_start_ = 0;
}

void GradientBuckets::layer_done(size_t pos) {
  PD_CHECK(pos < grads_by_layer_.size(), "layer position ", pos, " of ", grads_by_layer_.size());
  PD_CHECK(!layer_done_[pos], "layer position ", pos, " done twice in one round");
  layer_done_[pos] = 1;
  const int b = bucket_of_layer_[pos];
  if (b < 0) return;
  --layers_missing_[static_cast<size_t>(b)];
  start_ready_buckets();
}

void GradientBuckets::start_ready_buckets() {
  while (next_to_start_ < plan_.size() && layers_missing_[next_to_start_] == 0) {
    const size_t b = next_to_start_++;
    std::vector<Tensor> tensors;
    for (size_t pos : plan_[b].layers)
      for (const Tensor& t : grads_by_layer_[pos]) tensors.push_back(t);
    requests_[b] = transport_.iall_reduce(*group_, std::move(tensors), op_);
  }
}

void GradientBuckets::start_all() {
  for (size_t& missing : layers_missing_) missing = 0;  // whatever was not reported is final now
  start_ready_buckets();
}

bool GradientBuckets::test() {
  if (next_to_start_ < plan_.size()) return false;
  for (Request& r : requests_)
    if (!r.test()) return false;
  return true;
}

void GradientBuckets::wait(double timeout_s) {
  start_all();
  for (Request& r : requests_) r.wait(timeout_s);
}

void GradientBuckets::end_round(double timeout_s) {
  wait(timeout_s);
  rearm();
}

}  // namespace pd
