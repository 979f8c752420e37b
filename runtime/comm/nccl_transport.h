#pragma once
// NcclTransport: the Transport for one GPU per rank (docs/design.md §8). Device
// tensors travel over NCCL, device to device; everything else (message
// headers, host tensors, bootstrap) over the MPI transport it is built on.
//
// Links. NCCL send/recv block their CUDA stream until the peer's matching
// call runs, and all operations of one communicator are serialised, so two
// ranks sending to each other on one communicator can deadlock (A's send
// waits for B's receive, queued behind B's send, which waits for A's
// receive, queued behind A's send). Each *directed* link (from, to) that
// carries device tensors therefore gets its own two-rank communicator and
// stream, used in one direction only: no cycle can form. Each all-reduce
// group (a stage's replicas) gets its own communicator too. All of them are
// made at construction: rank 0 creates every NCCL unique id and broadcasts
// them over MPI (as nccl-tests does); the members then initialise the
// communicators one by one in the same global order (deadlock-free).
//
// Messages on a link: a small header (tag, meta, dtype, shape) over MPI on a
// reserved tag, then the payload over NCCL. Headers of one link arrive in
// send order, and the receiver posts its NCCL receive as each header
// arrives (eagerly, into a new device tensor), so NCCL's in-order matching
// always pairs the right send and receive; arrived messages then match
// posted receives by tag, as MPI would. Host tensors on a link go over MPI
// (second reserved tag) after their header. A peer without a link, or an
// all-reduce on a group without a communicator, falls back to host staging
// (StagedTransport).
//
// All-reduce over NCCL is NOT the MPI transport's rank-order sum: NCCL picks
// ring/tree algorithms and reduction orders by size and topology, so results
// can differ from `run --reference` in the last bits (a 2-rank sum is exact:
// a + b == b + a). Runs that must be bitwise reproducible use the staged
// transport (the default of `run --device cuda`).
//
// NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU
// detected"); the constructor checks the GPUs' UUIDs first and throws
// UserError naming the ranks. Progress: NCCL moves data on its own; headers
// are picked up whenever a request of this transport is tested or waited
// for (the executor does that between actions). One thread issues
// operations.
#include <deque>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "runtime/comm/mpi_transport.h"
#include "runtime/comm/staged_transport.h"

namespace pd {

// Which ranks talk over NCCL: directed point-to-point links and all-reduce
// groups. Every rank must construct the transport with the same lists.
struct NcclLinks {
  std::vector<std::pair<int, int>> p2p;  // (from, to)
  std::vector<std::vector<int>> groups;  // ascending ranks, >= 2 each
  // Every ordered pair and the whole world as one group (bench-comm, tests).
  static NcclLinks all_pairs(int world_size);
};

class NcclTransport final : public Transport {
 public:
  // `device` is this process's GPU, initialised (open_compute_device)
  // before; received device tensors are allocated there. Throws UserError
  // when NCCL is unavailable (no CUDA build, plugin built without NCCL) or
  // two ranks of a link or group share a GPU.
  NcclTransport(MpiTransport& control, Device device, const NcclLinks& links);
  // Collective with the linked peers: closes every link (a last header, so
  // no header receive stays posted on the MPI transport), waits (up to the
  // timeout) for queued NCCL work and destroys the communicators. During
  // exception unwinding it aborts them instead.
  ~NcclTransport() override;

  int rank() const override { return control_.rank(); }
  int world_size() const override { return control_.world_size(); }
  std::string name() const override { return "nccl"; }
  std::string host_of(int rank) const override { return control_.host_of(rank); }

  Request isend(const Tensor& t, int peer, int tag, int64_t meta = 0) override;
  Request irecv(Tensor into, int peer, int tag) override;
  Request irecv_any(int peer, int tag) override;
  // Two tags below the MPI transport's are reserved (headers, host payloads).
  int max_tag() const override { return control_.max_tag() - 2; }

  std::shared_ptr<CommGroup> make_group(std::vector<int> ranks) override { return control_.make_group(std::move(ranks)); }
  Request iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) override;

  void set_timeout(double seconds) override { control_.set_timeout(seconds); }
  double timeout() const override { return control_.timeout(); }
  [[noreturn]] void abort(const std::string& reason, int exit_code = 1) override;

  // True when device tensors to `peer` / over `ranks` use NCCL.
  bool links_to(int peer) const { return send_links_.count(peer) > 0; }
  bool reduces_over(const std::vector<int>& ranks) const { return group_comms_.count(ranks) > 0; }

  // Picks up arrived headers and posts their NCCL receives (called by the
  // requests' test()/wait()).
  void progress();

  struct Arrival;
  class RecvState;

 private:
  void deliver(int peer, int tag, std::shared_ptr<Arrival> a);
  void abort_communicators();

  MpiTransport& control_;
  StagedTransport staged_;
  Device device_;
  const void* api_ = nullptr;  // const CudaNcclApi*
  std::vector<void*> comms_;   // every communicator this rank belongs to
  std::map<int, void*> send_links_;  // to peer
  struct Incoming {
    void* comm = nullptr;
    Request header;  // the posted header receive
    bool closed = false;  // the peer's transport is gone
  };
  std::map<int, Incoming> recv_links_;  // from peer
  std::map<std::vector<int>, void*> group_comms_;
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<Arrival>>> unexpected_;   // (peer, tag)
  std::map<std::pair<int, int>, std::deque<std::shared_ptr<RecvState>>> posted_;     // (peer, tag)
};

}  // namespace pd
