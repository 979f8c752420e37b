#pragma once
// LocalTransport: the Transport contract inside one process, one object per
// virtual rank sharing a LocalHub. It is what `--reference` runs on: every
// worker's action list executed by one thread, messages delivered through
// in-memory mailboxes and all-reduces computed with the exact arithmetic of
// the MPI transport (reduce_in_rank_order), so a reference run and an MPI
// run of the same schedule agree bit for bit.
//
// Nothing here ever blocks: a receive or all-reduce that cannot complete
// yet reports test() == false, and wait() on it is a deadlock in the
// caller's order of execution (a logic_error), never a hang.
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "runtime/comm/transport.h"

namespace pd {

class LocalHub {
 public:
  explicit LocalHub(int world_size) : world_size_(world_size) {}
  int world_size() const { return world_size_; }

  struct Message {
    Tensor tensor;
    int64_t meta = 0;
  };
  struct Reduction;

 private:
  friend class LocalTransport;
  int world_size_;
  std::mutex mutex_;
  // (sender, receiver, tag) -> messages in send order
  std::map<std::tuple<int, int, int>, std::vector<Message>> mail_;
  // (group ranks, sequence number) -> reduction in progress
  std::map<std::pair<std::vector<int>, int64_t>, std::shared_ptr<Reduction>> reductions_;
};

class LocalTransport final : public Transport {
 public:
  LocalTransport(std::shared_ptr<LocalHub> hub, int rank) : hub_(std::move(hub)), rank_(rank) {}

  int rank() const override { return rank_; }
  int world_size() const override { return hub_->world_size(); }
  std::string name() const override { return "local"; }
  std::string host_of(int) const override { return "local"; }

  Request isend(const Tensor& t, int peer, int tag, int64_t meta = 0) override;
  Request irecv(Tensor into, int peer, int tag) override;
  Request irecv_any(int peer, int tag) override;
  int max_tag() const override { return 1 << 30; }

  std::shared_ptr<CommGroup> make_group(std::vector<int> ranks) override;
  Request iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) override;

  void set_timeout(double seconds) override { timeout_ = seconds; }
  double timeout() const override { return timeout_; }
  [[noreturn]] void abort(const std::string& reason, int exit_code = 1) override;

 private:
  std::shared_ptr<LocalHub> hub_;
  int rank_;
  double timeout_ = 60;
  std::map<std::vector<int>, int64_t> sequence_;  // per group: all-reduces issued
};

}  // namespace pd
