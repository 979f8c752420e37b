#pragma once
// StagedTransport: any Transport, carrying device (GPU) tensors through host
// memory. A device tensor is copied to the host before it is sent or
// all-reduced; a receive into a device tensor lands in a host buffer and is
// copied up when it completes; an all-reduce of device tensors reduces host
// copies with the wrapped transport's arithmetic and copies the results
// back. So the MPI transport's deterministic all-reduce (rank-order sums)
// still holds, and a GPU run through it is bitwise equal to `run
// --reference` on the same GPU (which stages its in-process transport the
// same way).
//
// It is the GPU transport when NCCL cannot be used (two ranks on one GPU,
// a build without NCCL) and the default for `run --device cuda`, because
// it keeps that bitwise guarantee; `--transport nccl` trades it for speed
// (nccl_transport.h).
//
// irecv_any delivers on the host, as the wrapped transport does: the
// sender's device is not part of a message. Layers take their input where
// it is and forward_layers/backward_layers move it to the weights' device.
// Host tensors pass through untouched. The wrapped transport must outlive
// this one; one thread issues operations (as for every transport).
#include <string>

#include "runtime/comm/transport.h"

namespace pd {

class StagedTransport final : public Transport {
 public:
  explicit StagedTransport(Transport& inner) : inner_(inner) {}

  int rank() const override { return inner_.rank(); }
  int world_size() const override { return inner_.world_size(); }
  std::string name() const override { return "staged-" + inner_.name(); }
  std::string host_of(int rank) const override { return inner_.host_of(rank); }

  Request isend(const Tensor& t, int peer, int tag, int64_t meta = 0) override;
  Request irecv(Tensor into, int peer, int tag) override;
  Request irecv_any(int peer, int tag) override { return inner_.irecv_any(peer, tag); }
  int max_tag() const override { return inner_.max_tag(); }

  std::shared_ptr<CommGroup> make_group(std::vector<int> ranks) override { return inner_.make_group(std::move(ranks)); }
  Request iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) override;
  void barrier(CommGroup& g) override { inner_.barrier(g); }

  void set_timeout(double seconds) override { inner_.set_timeout(seconds); }
  double timeout() const override { return inner_.timeout(); }
  [[noreturn]] void abort(const std::string& reason, int exit_code = 1) override;

  Transport& inner() { return inner_; }

 private:
  Transport& inner_;
};

}  // namespace pd
