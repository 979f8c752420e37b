#pragma once
// LoopbackTransport: messages a rank sends to itself - where a V-shaped
// schedule's two stages on one worker meet (runtime/schedule) - handed over
// in memory; everything else passes to the wrapped transport, so no
// transport needs to support sending to itself.
#include <deque>
#include <map>
#include <memory>
#include <string>

#include "runtime/comm/transport.h"

namespace pd {

class LoopbackTransport final : public Transport {
 public:
  explicit LoopbackTransport(Transport& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::string name() const override { return inner_.name(); }
  std::string host_of(int rank) const override { return inner_.host_of(rank); }

  // To itself: kept (a copy) until the matching receive takes it; the
  // request is complete at once.
  Request isend(const Tensor& t, int peer, int tag, int64_t meta = 0) override;
  // From itself: completes once the matching send has happened; waiting for
  // one that has not is a schedule error (nothing else could send it).
  Request irecv(Tensor into, int peer, int tag) override;
  Request irecv_any(int peer, int tag) override;
  int max_tag() const override { return inner_.max_tag(); }

  std::shared_ptr<CommGroup> make_group(std::vector<int> ranks) override { return inner_.make_group(std::move(ranks)); }
  Request iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) override {
    return inner_.iall_reduce(g, std::move(tensors), op);
  }
  void barrier(CommGroup& g) override { inner_.barrier(g); }

  void set_timeout(double seconds) override { inner_.set_timeout(seconds); }
  double timeout() const override { return inner_.timeout(); }
  [[noreturn]] void abort(const std::string& reason, int exit_code = 1) override;

  struct Message {
    Tensor tensor;
    int64_t meta = 0;
  };

 private:
  Transport& inner_;
  std::shared_ptr<std::map<int, std::deque<Message>>> mail_ = std::make_shared<std::map<int, std::deque<Message>>>();
};

}  // namespace pd
