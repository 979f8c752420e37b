#include "runtime/comm/loopback_transport.h"

#include <cstdlib>

#include "core/error.h"

namespace pd {
namespace {

class SelfReceive final : public RequestState {
 public:
  using Mail = std::map<int, std::deque<LoopbackTransport::Message>>;
  SelfReceive(std::shared_ptr<Mail> mail, int rank, int tag, Tensor into)
      : mail_(std::move(mail)), rank_(rank), tag_(tag), into_(std::move(into)) {}

  bool test() override {
    if (done_) return true;
    auto box = mail_->find(tag_);
    if (box == mail_->end() || box->second.empty()) return false;
    got_ = std::move(box->second.front());
    box->second.pop_front();
    if (into_.defined() && into_.shape() != got_.tensor.shape())
      throw RuntimeFailure(cat("rank ", rank_, " sent itself shape ", shape_str(got_.tensor.shape()), " but expected ",
                               shape_str(into_.shape()), " (tag ", tag_, ")"));
    done_ = true;
    return true;
  }
  void wait(double) override {
    if (!test())
      throw RuntimeFailure(cat("rank ", rank_, " waits for a message to itself (tag ", tag_,
                               ") that it has not sent: the schedule's order is wrong"));
  }
  Tensor tensor() const override { return got_.tensor; }
  int64_t meta() const override { return got_.meta; }

 private:
  std::shared_ptr<Mail> mail_;
  int rank_, tag_;
  Tensor into_;
  LoopbackTransport::Message got_;
  bool done_ = false;
};

}  // namespace

Request LoopbackTransport::isend(const Tensor& t, int peer, int tag, int64_t meta) {
  if (peer != rank()) return inner_.isend(t, peer, tag, meta);
  (*mail_)[tag].push_back({t.clone(), meta});
  return Request();
}

Request LoopbackTransport::irecv(Tensor into, int peer, int tag) {
  if (peer != rank()) return inner_.irecv(std::move(into), peer, tag);
  return Request(std::make_shared<SelfReceive>(mail_, rank(), tag, std::move(into)));
}

Request LoopbackTransport::irecv_any(int peer, int tag) {
  if (peer != rank()) return inner_.irecv_any(peer, tag);
  return Request(std::make_shared<SelfReceive>(mail_, rank(), tag, Tensor{}));
}

void LoopbackTransport::abort(const std::string& reason, int exit_code) {
  inner_.abort(reason, exit_code);
  std::abort();  // not reached: the inner transport's abort does not return
}

}  // namespace pd
