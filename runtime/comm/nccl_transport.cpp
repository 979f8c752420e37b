#include "runtime/comm/nccl_transport.h"

// C API only: Open MPI's mpi.h would otherwise drag in the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <set>
#include <string>
#include <thread>

#include "core/cuda_plugin.h"
#include "core/error.h"
#include "runtime/comm/mpi_check.h"


namespace pd {

namespace {

using Clock = std::chrono::steady_clock;
constexpr size_t kIdBytes = 128;
constexpr size_t kUuidBytes = 64;
// Header: tag, meta, kind, dtype, ndim, then up to kMaxDims dimensions.
constexpr int kMaxDims = 11;
constexpr int64_t kHeaderWords = 5 + kMaxDims;
// kClose ends a link: the last header, sent when the transport is destroyed,
// so that the receiver's posted header receive is matched (it would
// otherwise steal a header of a later transport on the same MPI transport).
enum PayloadKind : int64_t { kDevicePayload = 0, kHostPayload = 1, kClose = 2 };

const CudaNcclApi& api_of(const void* p) { return *static_cast<const CudaNcclApi*>(p); }

const CudaNcclApi* load_nccl_api() {
  std::string why;
  const CudaPluginApi* plugin = cuda_plugin(&why);
  if (!plugin) throw UserError(cat("--transport nccl: ", why, "; use --transport staged with --device cuda, or --device cpu"));
  const CudaNcclApi* nccl = plugin->nccl();
  if (!nccl || !nccl->available())
    throw UserError("--transport nccl: this CUDA backend was built without NCCL (libnccl was not found when it was "
                    "configured); use --transport staged");
  return nccl;
}

// Deadline loop shared by the requests: polls `done` until it holds or the
// timeout passes (then throws naming the peer and the operation).
template <class F>
void wait_until(F done, double timeout_s, int rank, const std::string& what) {
  const auto start = Clock::now();
  for (int spins = 0;; ++spins) {
    if (done()) return;
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (timeout_s > 0 && waited > timeout_s)
      throw RuntimeFailure(cat("rank ", rank, ": timed out after ", timeout_s, " s ", what));
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(50));
    else std::this_thread::yield();
  }
}

class SendState final : public RequestState {
 public:
  SendState(NcclTransport& tr, const void* api, Request header, Request host_payload, void* comm, void* event,
            Tensor keep, int peer, int tag)
      : tr_(tr), api_(api), header_(std::move(header)), host_(std::move(host_payload)), comm_(comm), event_(event),
        keep_(std::move(keep)), peer_(peer), tag_(tag) {}
  ~SendState() override { api_of(api_).event_release(event_); }

  bool test() override {
    if (done_) return true;
    tr_.progress();
    if (!header_.test()) return false;
    if (host_.defined() && !host_.test()) return false;
    if (event_ && !api_of(api_).event_done(comm_, event_)) return false;
    done_ = true;
    keep_ = Tensor{};
    return true;
  }
  void wait(double timeout_s) override {
    wait_until([&] { return test(); }, timeout_s < 0 ? tr_.timeout() : timeout_s, tr_.rank(),
               cat("waiting for rank ", peer_, " (NCCL send tag ", tag_, " to rank ", peer_, ")"));
  }

 private:
  NcclTransport& tr_;
  const void* api_;
  Request header_, host_;
  void* comm_;
  void* event_;
  Tensor keep_;  // the payload stays alive until the transfer is done
  int peer_, tag_;
  bool done_ = false;
};

class ReduceState final : public RequestState {
 public:
  ReduceState(NcclTransport& tr, const void* api, void* comm, void* event, std::vector<Tensor> keep)
      : tr_(tr), api_(api), comm_(comm), event_(event), keep_(std::move(keep)) {}
  ~ReduceState() override { api_of(api_).event_release(event_); }
  bool test() override {
    if (done_) return true;
    tr_.progress();  // a peer's send to us must not wait while we wait for the replicas
    if (api_of(api_).event_done(comm_, event_)) {
      done_ = true;
      keep_.clear();
    }
    return done_;
  }
  void wait(double timeout_s) override {
    wait_until([&] { return test(); }, timeout_s < 0 ? tr_.timeout() : timeout_s, tr_.rank(),
               "waiting for an NCCL all-reduce (a replica is slow or gone)");
  }

 private:
  NcclTransport& tr_;
  const void* api_;
  void* comm_;
  void* event_;
  std::vector<Tensor> keep_;
  bool done_ = false;
};

}  // namespace

// A message that arrived on a link: a device tensor being received by NCCL
// (done when its event fires) or a host tensor being received over MPI.
struct NcclTransport::Arrival {
  const void* api = nullptr;
  void* comm = nullptr;
  Tensor tensor;
  int64_t meta = 0;
  void* event = nullptr;
  Request host;
  ~Arrival() {
    if (event) api_of(api).event_release(event);
  }
  bool done() {
    if (host.defined()) return host.test();
    return !event || api_of(api).event_done(comm, event);
  }
  Tensor result() const { return host.defined() ? host.tensor() : tensor; }
  int64_t result_meta() const { return host.defined() ? host.meta() : meta; }
};

class NcclTransport::RecvState final : public RequestState {
 public:
  RecvState(NcclTransport& tr, Tensor into, int peer, int tag) : tr_(tr), into_(std::move(into)), peer_(peer), tag_(tag) {}
  void matched(std::shared_ptr<Arrival> a) { arrival_ = std::move(a); }
  // The posted buffer, when NCCL can receive straight into it.
  Tensor buffer_for(const Shape& shape, DType dtype) const {
    if (into_.defined() && into_.device().is_cuda() && into_.shape() == shape && into_.dtype() == dtype) return into_;
    return {};
  }

  bool test() override {
    if (done_) return true;
    tr_.progress();
    if (!arrival_ || !arrival_->done()) return false;
    Tensor got = arrival_->result();
    meta_ = arrival_->result_meta();
    arrival_.reset();
    if (into_.defined() && !got.same_storage(into_)) {
      if (got.shape() != into_.shape() || got.dtype() != into_.dtype())
        throw RuntimeFailure(cat("rank ", tr_.rank(), ": rank ", peer_, " sent ", shape_str(got.shape()), " ",
                                 dtype_name(got.dtype()), " on tag ", tag_, " but the receive expects ",
                                 shape_str(into_.shape()), " ", dtype_name(into_.dtype())));
      into_.copy_from(got);
    } else {
      into_ = got;
    }
    done_ = true;
    return true;
  }
  void wait(double timeout_s) override {
    wait_until([&] { return test(); }, timeout_s < 0 ? tr_.timeout() : timeout_s, tr_.rank(),
               cat("waiting for rank ", peer_, " (NCCL receive tag ", tag_, " from rank ", peer_, ")"));
  }
  Tensor tensor() const override { return into_; }
  int64_t meta() const override { return meta_; }

 private:
  NcclTransport& tr_;
  Tensor into_;
  int peer_, tag_;
  std::shared_ptr<Arrival> arrival_;
  int64_t meta_ = 0;
  bool done_ = false;
};

NcclLinks NcclLinks::all_pairs(int world_size) {
  NcclLinks l;
  std::vector<int> all;
  for (int a = 0; a < world_size; ++a) {
    all.push_back(a);
    for (int b = 0; b < world_size; ++b)
      if (a != b) l.p2p.emplace_back(a, b);
  }
  if (world_size > 1) l.groups.push_back(all);
  return l;
}

NcclTransport::NcclTransport(MpiTransport& control, Device device, const NcclLinks& links)
    : control_(control), staged_(control), device_(device) {
  PD_CHECK(device.is_cuda(), "NcclTransport on ", device.str(), ": it carries GPU tensors");
  const CudaNcclApi& api = *load_nccl_api();
  api_ = &api;
  const int me = control_.rank(), n = control_.world_size();

  // NCCL would fail deep inside init with "Duplicate GPU detected": say who.
  std::vector<char> uuids(kUuidBytes * static_cast<size_t>(n), 0);
  char mine[kUuidBytes] = {};
  api.device_uuid(mine, sizeof mine);
  control_.run_on_comm_thread([&] {
    PD_MPI_CHECK(MPI_Allgather(mine, kUuidBytes, MPI_CHAR, uuids.data(), kUuidBytes, MPI_CHAR, MPI_COMM_WORLD));
  });
  auto uuid_of = [&](int r) { return std::string(uuids.data() + kUuidBytes * static_cast<size_t>(r)); };
  auto require_distinct = [&](const std::vector<int>& members) {
    for (size_t i = 0; i < members.size(); ++i)
      for (size_t j = i + 1; j < members.size(); ++j)
        if (uuid_of(members[i]) == uuid_of(members[j]))
          throw UserError(cat("--transport nccl: ranks ", members[i], " and ", members[j], " use the same GPU (",
                              uuid_of(members[i]), ") and NCCL needs one GPU per rank; run one rank per GPU, or use "
                              "--transport staged, which carries device tensors through host memory"));
  };

  // Every communicator of the job, in one global order.
  std::vector<std::vector<int>> members;
  for (const auto& [from, to] : links.p2p) {
    PD_CHECK(from != to && from >= 0 && to >= 0 && from < n && to < n, "bad NCCL link ", from, " -> ", to);
    members.push_back({from, to});  // index 0 sends, index 1 receives
  }
  for (std::vector<int> g : links.groups) {
    std::sort(g.begin(), g.end());
    PD_CHECK(g.size() >= 2 && g.front() >= 0 && g.back() < n, "bad NCCL group of ", g.size(), " ranks");
    members.push_back(g);
  }
  for (const auto& m : members) require_distinct(m);

  // Rank 0 makes every id and broadcasts them (nccl-tests style).
  std::vector<char> ids(kIdBytes * members.size(), 0);
  if (me == 0)
    for (size_t i = 0; i < members.size(); ++i) api.make_unique_id(ids.data() + kIdBytes * i);
  if (!ids.empty())
    control_.run_on_comm_thread(
        [&] { PD_MPI_CHECK(MPI_Bcast(ids.data(), static_cast<int>(ids.size()), MPI_CHAR, 0, MPI_COMM_WORLD)); });

  // One by one in the global order: the earliest unfinished communicator
  // always has all its members waiting in it, so this cannot deadlock.
  try {
    for (size_t i = 0; i < members.size(); ++i) {
      const auto& m = members[i];
      auto pos = std::find(m.begin(), m.end(), me);
      if (pos == m.end()) continue;
      void* comm = api.create(ids.data() + kIdBytes * i, static_cast<int>(m.size()), static_cast<int>(pos - m.begin()));
      comms_.push_back(comm);
      if (i < links.p2p.size()) {
        if (m[0] == me) send_links_[m[1]] = comm;
        else recv_links_[m[0]].comm = comm;
      } else {
        group_comms_[m] = comm;
      }
    }
  } catch (...) {
    abort_communicators();
    throw;
  }
  for (auto& [peer, in] : recv_links_) in.header = control_.irecv_any(peer, control_.max_tag());
}

NcclTransport::~NcclTransport() {
  const CudaNcclApi& api = api_of(api_);
  if (std::uncaught_exceptions() > 0) {
    abort_communicators();
  } else {
    try {
      // Close every link (both ends destroy their transports at the end of a run).
      Tensor close = Tensor::zeros({kHeaderWords}, DType::I64);
      close.data<int64_t>()[2] = kClose;
      std::vector<Request> closes;
      for (const auto& [peer, comm] : send_links_) closes.push_back(control_.isend(close, peer, control_.max_tag()));
      wait_all(closes);
      wait_until(
          [&] {
            progress();
            for (const auto& [peer, in] : recv_links_)
              if (!in.closed) return false;
            return true;
          },
          timeout(), rank(), "for the peers to close their NCCL links at shutdown");
      // Let queued transfers finish before the communicators go away.
      for (void* c : comms_) {
        void* ev = api.record_event(c);
        wait_until([&] { return api.event_done(c, ev); }, timeout(), rank(), "finishing NCCL transfers at shutdown");
        api.event_release(ev);
      }
    } catch (...) {
      abort_communicators();
    }
  }
  unexpected_.clear();
  posted_.clear();
  for (void* c : comms_) api.destroy(c);
}

void NcclTransport::abort_communicators() {
  const CudaNcclApi& api = api_of(api_);
  for (void* c : comms_) api.abort(c);
}

void NcclTransport::abort(const std::string& reason, int exit_code) {
  abort_communicators();
  control_.abort(reason, exit_code);
}

Request NcclTransport::isend(const Tensor& t, int peer, int tag, int64_t meta) {
  auto link = send_links_.find(peer);
  if (link == send_links_.end()) return staged_.isend(t, peer, tag, meta);
  PD_CHECK(tag >= 0 && tag <= max_tag(), "tag ", tag, " outside [0, ", max_tag(), "]");
  PD_CHECK(t.ndim() <= kMaxDims, "NCCL messages carry at most ", kMaxDims, " dimensions, got ", t.ndim());
  const bool device = t.defined() && t.device().is_cuda();
  Tensor header = Tensor::zeros({kHeaderWords}, DType::I64);
  int64_t* h = header.data<int64_t>();
  h[0] = tag;
  h[1] = meta;
  h[2] = device ? kDevicePayload : kHostPayload;
  h[3] = static_cast<int64_t>(t.dtype());
  h[4] = t.ndim();
  for (int d = 0; d < t.ndim(); ++d) h[5 + d] = t.dim(d);
  Request hdr = control_.isend(header, peer, control_.max_tag());
  if (!device) {
    Request payload = control_.isend(t, peer, control_.max_tag() - 1, meta);
    return Request(std::make_shared<SendState>(*this, api_, std::move(hdr), std::move(payload), nullptr, nullptr,
                                               Tensor{}, peer, tag));
  }
  const CudaNcclApi& api = api_of(api_);
  void* event = nullptr;
  if (t.nbytes() > 0) {
    api.send(link->second, t.raw(), t.nbytes(), 1);
    event = api.record_event(link->second);
  }
  return Request(std::make_shared<SendState>(*this, api_, std::move(hdr), Request{}, link->second, event, t, peer, tag));
}

Request NcclTransport::irecv_any(int peer, int tag) { return irecv(Tensor{}, peer, tag); }

Request NcclTransport::irecv(Tensor into, int peer, int tag) {
  if (!recv_links_.count(peer)) return into.defined() ? staged_.irecv(std::move(into), peer, tag) : staged_.irecv_any(peer, tag);
  PD_CHECK(tag >= 0 && tag <= max_tag(), "tag ", tag, " outside [0, ", max_tag(), "]");
  auto state = std::make_shared<RecvState>(*this, std::move(into), peer, tag);
  auto& waiting = unexpected_[{peer, tag}];
  if (!waiting.empty()) {
    state->matched(std::move(waiting.front()));
    waiting.pop_front();
  } else {
    posted_[{peer, tag}].push_back(state);
  }
  progress();
  return Request(state);
}

void NcclTransport::deliver(int peer, int tag, std::shared_ptr<Arrival> a) {
  auto& q = posted_[{peer, tag}];
  if (q.empty()) {
    unexpected_[{peer, tag}].push_back(std::move(a));
    return;
  }
  q.front()->matched(std::move(a));
  q.pop_front();
}

void NcclTransport::progress() {
  const CudaNcclApi& api = api_of(api_);
  for (auto& [peer, in] : recv_links_) {
    while (!in.closed && in.header.test()) {
      const Tensor header = in.header.tensor();
      PD_CHECK(header.dtype() == DType::I64 && header.numel() == kHeaderWords, "malformed NCCL message header from rank ",
               peer);
      const int64_t* h = header.data<int64_t>();
      if (h[2] == kClose) {
        in.closed = true;
        in.header = Request{};
        break;
      }
      in.header = control_.irecv_any(peer, control_.max_tag());
      auto a = std::make_shared<Arrival>();
      a->api = api_;
      a->comm = in.comm;
      a->meta = h[1];
      if (h[2] == kHostPayload) {
        a->host = control_.irecv_any(peer, control_.max_tag() - 1);
      } else {
        Shape shape(h + 5, h + 5 + h[4]);
        const DType dtype = static_cast<DType>(h[3]);
        auto& waiting = posted_[{peer, static_cast<int>(h[0])}];
        if (!waiting.empty()) a->tensor = waiting.front()->buffer_for(shape, dtype);
        if (!a->tensor.defined()) a->tensor = Tensor::empty(shape, dtype, device_);
        if (a->tensor.nbytes() > 0) {
          api.recv(in.comm, a->tensor.raw(), a->tensor.nbytes(), 0);
          a->event = api.record_event(in.comm);
        }
      }
      deliver(peer, static_cast<int>(h[0]), std::move(a));
    }
  }
}

Request NcclTransport::iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) {
  auto it = group_comms_.find(g.ranks());
  bool device = !tensors.empty();
  for (const Tensor& t : tensors) device = device && t.device().is_cuda() && t.dtype() == DType::F32;
  if (it == group_comms_.end() || !device) return staged_.iall_reduce(g, std::move(tensors), op);
  const CudaNcclApi& api = api_of(api_);
  for (Tensor& t : tensors)
    if (t.numel() > 0) api.all_reduce_f32(it->second, t.f32(), static_cast<size_t>(t.numel()), op == ReduceOp::Average);
  void* event = api.record_event(it->second);
  return Request(std::make_shared<ReduceState>(*this, api_, it->second, event, std::move(tensors)));
}

}  // namespace pd
