#include "runtime/comm/staged_transport.h"

#include <cstdlib>

#include "core/error.h"

namespace pd {

namespace {

bool on_host(const Tensor& t) { return !t.defined() || t.device().is_cpu(); }

// A request on host buffers whose results are copied into device tensors
// once, when it completes (from test() or wait(), on the caller's thread).
class CopyBackState final : public RequestState {
 public:
  CopyBackState(Request inner, std::vector<Tensor> host, std::vector<Tensor> device)
      : inner_(std::move(inner)), host_(std::move(host)), device_(std::move(device)) {}

  bool test() override {
    if (!copied_ && !inner_.test()) return false;
    copy_back();
    return true;
  }
  void wait(double timeout_s) override {
    inner_.wait(timeout_s);
    copy_back();
  }
  // A receive: the device tensor it filled (all-reduces have no tensor).
  Tensor tensor() const override { return device_.size() == 1 ? device_[0] : Tensor{}; }
  int64_t meta() const override { return inner_.meta(); }

 private:
  void copy_back() {
    if (copied_) return;
    for (size_t i = 0; i < host_.size(); ++i)
      if (device_[i].defined()) device_[i].copy_from(host_[i]);
    host_.clear();
    copied_ = true;
  }

  Request inner_;
  std::vector<Tensor> host_, device_;
  bool copied_ = false;
};

}  // namespace

Request StagedTransport::isend(const Tensor& t, int peer, int tag, int64_t meta) {
  // The copy to the host is synchronous (it waits for the kernels that
  // produce t), so the host copy is complete before MPI reads it.
  return inner_.isend(on_host(t) ? t : t.to(Device::cpu()), peer, tag, meta);
}

Request StagedTransport::irecv(Tensor into, int peer, int tag) {
  if (on_host(into)) return inner_.irecv(std::move(into), peer, tag);
  Tensor host = Tensor::empty(into.shape(), into.dtype());
  Request r = inner_.irecv(host, peer, tag);
  return Request(std::make_shared<CopyBackState>(std::move(r), std::vector<Tensor>{host}, std::vector<Tensor>{into}));
}

Request StagedTransport::iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) {
  bool any_device = false;
  for (const Tensor& t : tensors) any_device = any_device || !on_host(t);
  if (!any_device) return inner_.iall_reduce(g, std::move(tensors), op);
  std::vector<Tensor> host, device;
  for (Tensor& t : tensors) {
    if (on_host(t)) {
      host.push_back(t);
      device.emplace_back();  // reduced in place already
    } else {
      host.push_back(t.to(Device::cpu()));
      device.push_back(t);
    }
  }
  Request r = inner_.iall_reduce(g, host, op);
  return Request(std::make_shared<CopyBackState>(std::move(r), std::move(host), std::move(device)));
}

void StagedTransport::abort(const std::string& reason, int exit_code) {
  inner_.abort(reason, exit_code);
  std::abort();  // not reached: the inner transport's abort does not return
}

}  // namespace pd
