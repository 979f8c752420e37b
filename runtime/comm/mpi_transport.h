#pragma once
// MpiTransport: the Transport over MPI for host-memory tensors.
//
// One communication thread owns every MPI call after initialization. The
// executor's threads hand it work through a queue and block on condition
// variables, never in MPI. Why a dedicated thread rather than
// MPI_THREAD_MULTIPLE with calls from every thread:
//  - Open MPI 4 has no asynchronous progress for shared memory/TCP ("OMPI
//    progress: no" in ompi_info): a non-blocking transfer only moves while
//    someone calls into MPI. A thread that keeps testing its requests is
//    what makes communication overlap compute; given that thread, letting
//    other threads call MPI too only adds lock contention.
//  - Waits with deadlines (timeouts naming the silent peer) and the abort
//    notice to peers are easy when one thread sees every request.
//  - It needs only MPI_THREAD_SERIALIZED, which every MPI provides.
// The thread polls hot while someone is blocked in wait() or right after
// traffic, and otherwise every ~50 us, so it costs little CPU while the
// compute threads run.
#include <functional>
#include <memory>
#include <string>

#include "runtime/comm/transport.h"

namespace pd {

class MpiEngine;  // the communication thread and its requests
class ShmEngine;  // the same-host path: a shared-memory segment per host

class MpiTransport final : public Transport {
 public:
  // Initializes MPI (unless the program already did) and starts the
  // communication thread. One per process. Also installs the SIGINT/SIGTERM
  // handlers (install_stop_signal_handlers).
  explicit MpiTransport(double timeout_s = 60.0);
  // Normal exit: finishes pending operations, then MPI_Finalize. During
  // exception unwinding or after a failure: abort() instead, so that no
  // peer is left waiting for this rank.
  ~MpiTransport() override;
  // Normal exit now: in-flight operations finish (bounded by the timeout),
  // receives nobody matched are cancelled (their requests then throw
  // "cancelled at shutdown" from test() and wait() instead of hanging),
  // then MPI_Finalize. Requests stay safe to ask afterwards; start no new
  // ones. The destructor does this when not failing.
  void shutdown();

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  std::string name() const override { return "mpi"; }
  std::string host_of(int rank) const override;

  Request isend(const Tensor& t, int peer, int tag, int64_t meta = 0) override;
  Request irecv(Tensor into, int peer, int tag) override;
  Request irecv_any(int peer, int tag) override;
  int max_tag() const override;

  std::shared_ptr<CommGroup> make_group(std::vector<int> ranks) override;
  Request iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) override;

  void set_timeout(double seconds) override;
  double timeout() const override;
  [[noreturn]] void abort(const std::string& reason, int exit_code = 1) override;

  // Ranks on one host exchange tensors and all-reduce through a
  // shared-memory segment of their own (shm_engine.h), not MPI, unless
  // PIPEDREAM_SHM=off or the segment cannot be made (then rank 0 of the
  // host prints a one-line note naming why, and MPI carries everything).
  // True when messages to `peer`, or the group's all-reduces, take it.
  bool uses_shared_memory(int peer) const;
  bool uses_shared_memory(const CommGroup& g) const;
  // Switches the same-host path off (or back on, when a segment exists):
  // every rank at the same point with nothing in flight. Returns whether
  // the path is in use now. For comparisons (bench-comm --same-host mpi).
  bool use_shared_memory(bool on);
  bool shared_memory_on() const { return shm_on_; }

  // Runs fn on the communication thread (the only thread allowed to call
  // MPI) with MPI_COMM_WORLD and waits for it; for bootstrapping other
  // transports (e.g. broadcasting an NCCL unique id).
  void run_on_comm_thread(const std::function<void()>& fn);

 private:
  int rank_ = 0;
  int size_ = 1;
  std::vector<std::string> hosts_;
  void start_same_host_path(double timeout_s);

  std::unique_ptr<MpiEngine> engine_;
  std::unique_ptr<ShmEngine> shm_;
  bool shm_on_ = false;
  bool we_initialized_mpi_ = false;
  bool shut_down_ = false;
};

}  // namespace pd
