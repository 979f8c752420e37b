#include "runtime/local_transport.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "core/error.h"

namespace pd {

struct LocalHub::Reduction {
  std::vector<int> ranks;
  ReduceOp op = ReduceOp::Sum;
  std::map<int, std::vector<Tensor>> contributions;  // by rank
  bool done = false;
};

namespace {

class LocalGroup final : public CommGroup {
 public:
  LocalGroup(std::vector<int> ranks, int me) : ranks_(std::move(ranks)) {
    auto it = std::find(ranks_.begin(), ranks_.end(), me);
    PD_CHECK(it != ranks_.end(), "rank ", me, " is not in the group it makes");
    index_ = static_cast<int>(it - ranks_.begin());
  }
  const std::vector<int>& ranks() const override { return ranks_; }
  int index() const override { return index_; }

 private:
  std::vector<int> ranks_;
  int index_ = 0;
};

// A send is complete at once: the hub holds its own copy.
class DoneState final : public RequestState {
 public:
  bool test() override { return true; }
  void wait(double) override {}
};

class RecvState final : public RequestState {
 public:
  RecvState(LocalHub* hub, std::mutex* mu, std::vector<LocalHub::Message>* box, Tensor into, int peer)
      : hub_(hub), mu_(mu), box_(box), into_(std::move(into)), peer_(peer) {}
  bool test() override {
    if (done_) return true;
    std::lock_guard lk(*mu_);
    if (box_->empty()) return false;
    LocalHub::Message msg = std::move(box_->front());
    box_->erase(box_->begin());
    if (into_.defined()) {
      if (into_.shape() != msg.tensor.shape())
        throw RuntimeFailure(cat("rank ", peer_, " sent shape ", shape_str(msg.tensor.shape()), " but ",
                                 shape_str(into_.shape()), " was expected"));
      into_.copy_from(msg.tensor);
    } else {
      into_ = std::move(msg.tensor);
    }
    meta_ = msg.meta;
    done_ = true;
    return true;
  }
  void wait(double) override {
    if (!test())
      throw std::logic_error(cat("reference execution order waits for a message from rank ", peer_,
                                 " that was never sent (deadlock)"));
  }
  Tensor tensor() const override { return into_; }
  int64_t meta() const override { return meta_; }

 private:
  LocalHub* hub_;
  std::mutex* mu_;
  std::vector<LocalHub::Message>* box_;
  Tensor into_;
  int peer_;
  int64_t meta_ = 0;
  bool done_ = false;
};

class ReduceState final : public RequestState {
 public:
  ReduceState(std::mutex* mu, std::shared_ptr<LocalHub::Reduction> r) : mu_(mu), r_(std::move(r)) {}
  bool test() override {
    std::lock_guard lk(*mu_);
    return r_->done;
  }
  void wait(double) override {
    if (!test())
      throw std::logic_error("reference execution order waits for an all-reduce whose members never all joined (deadlock)");
  }

 private:
  std::mutex* mu_;
  std::shared_ptr<LocalHub::Reduction> r_;
};

// Every member's tensors get ((x_0 + x_1) + ...) in rank order.
void finish_reduction(LocalHub::Reduction& r) {
  const std::vector<Tensor>& first = r.contributions.begin()->second;
  for (size_t t = 0; t < first.size(); ++t) {
    std::vector<const float*> in;
    for (int rank : r.ranks) in.push_back(r.contributions.at(rank)[t].f32());
    Tensor sum = Tensor::empty(first[t].shape());
    reduce_in_rank_order(in, sum.f32(), static_cast<size_t>(sum.numel()), r.op);
    for (auto& [rank, tensors] : r.contributions) tensors[t].copy_from(sum);
  }
  r.contributions.clear();
  r.done = true;
}

}  // namespace

Request LocalTransport::isend(const Tensor& t, int peer, int tag, int64_t meta) {
  PD_CHECK(peer >= 0 && peer < world_size(), "isend to rank ", peer);  // itself too: a V's turn
  std::lock_guard lk(hub_->mutex_);
  hub_->mail_[{rank_, peer, tag}].push_back({t.clone(), meta});
  return Request(std::make_shared<DoneState>());
}

Request LocalTransport::irecv(Tensor into, int peer, int tag) {
  PD_CHECK(peer >= 0 && peer < world_size(), "irecv from rank ", peer);
  std::lock_guard lk(hub_->mutex_);
  auto* box = &hub_->mail_[{peer, rank_, tag}];
  return Request(std::make_shared<RecvState>(hub_.get(), &hub_->mutex_, box, std::move(into), peer));
}

Request LocalTransport::irecv_any(int peer, int tag) { return irecv(Tensor{}, peer, tag); }

std::shared_ptr<CommGroup> LocalTransport::make_group(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  return std::make_shared<LocalGroup>(std::move(ranks), rank_);
}

Request LocalTransport::iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) {
  const std::vector<int>& ranks = g.ranks();
  const int64_t seq = sequence_[ranks]++;
  std::lock_guard lk(hub_->mutex_);
  auto& slot = hub_->reductions_[{ranks, seq}];
  if (!slot) {
    slot = std::make_shared<LocalHub::Reduction>();
    slot->ranks = ranks;
    slot->op = op;
  }
  auto r = slot;
  r->contributions[rank_] = std::move(tensors);
  if (r->contributions.size() == ranks.size()) {
    finish_reduction(*r);
    hub_->reductions_.erase({ranks, seq});
  }
  return Request(std::make_shared<ReduceState>(&hub_->mutex_, r));
}

void LocalTransport::abort(const std::string& reason, int exit_code) {
  std::fprintf(stderr, "pipedream: reference rank %d: %s\n", rank_, reason.c_str());
  std::exit(exit_code);
}

}  // namespace pd
