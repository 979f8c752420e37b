#pragma once
// Transport: how pipeline workers exchange tensors (docs/design.md §8).
//
// The executor sees only this interface. MpiTransport (mpi_transport.h)
// moves host tensors, StagedTransport (staged_transport.h) stages device
// tensors through the host over another transport, and NcclTransport
// (nccl_transport.h) moves them GPU to GPU. Every operation is
// non-blocking and returns a Request; communication progresses on its own
// (a progress thread in the MPI transport) while the caller computes.
//
// Failure contract, for every implementation:
//  - Request::wait() that exceeds the transport's timeout throws
//    RuntimeFailure naming the rank it was waiting on ("... waiting for
//    rank 3 ..."). The transport itself stays usable; the caller normally
//    answers with abort(reason).
//  - abort(reason) ends every rank of the job with a non-zero exit code; the
//    aborting rank prints the reason (or hands it to the abort reporter:
//    the launching process then prints it once), the others print that rank N aborted
//    and why (when they still can), then exit.
//  - Destroying a transport while an exception is propagating, or after a
//    failure, aborts the job instead of finalizing: a rank that leaves
//    early must not leave its peers hanging in a collective.
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace pd {

// What a transport implements behind a Request.
class RequestState {
 public:
  virtual ~RequestState() = default;
  virtual bool test() = 0;
  virtual void wait(double timeout_s) = 0;
  virtual Tensor tensor() const { return {}; }
  virtual int64_t meta() const { return 0; }
};

// A pending operation. Cheap to copy (shared state). A default-constructed
// Request is already complete.
class Request {
 public:
  using State = RequestState;
  Request() = default;
  explicit Request(std::shared_ptr<State> s) : state_(std::move(s)) {}

  // True when the operation has finished (never blocks; never throws on
  // timeout; throws RuntimeFailure if the operation failed).
  bool test();
  // Blocks until done; throws RuntimeFailure on timeout (naming the peer)
  // or when the job is aborting. timeout_s < 0: the transport's timeout.
  void wait(double timeout_s = -1);

  // For a receive: the tensor that arrived (the one passed to irecv, or a
  // new one of the sender's shape/dtype) and the sender's 64-bit `meta`
  // (e.g. the weight version for vertical sync). Valid after wait()/test().
  Tensor tensor() const;
  int64_t meta() const;

  bool defined() const { return state_ != nullptr; }
  State* state() const { return state_.get(); }

 private:
  std::shared_ptr<State> state_;
};

// Where Transport::abort hands its reason instead of printing it: `pipedream
// run`'s launcher error folder (runtime/launcher.h report_error_to_launcher),
// whose first report the launcher prints as its last line. Returns false
// when it could not take it (then abort prints). Null: always print.
using AbortReporter = bool (*)(const std::string& reason, int exit_code);
void set_abort_reporter(AbortReporter reporter);
AbortReporter abort_reporter();

// Waits for all requests (in order; the first failure is thrown).
void wait_all(std::vector<Request>& requests, double timeout_s = -1);

enum class ReduceOp : uint8_t { Sum, Average };

// A set of ranks that all-reduce together (a stage's replicas). Made once
// by every member with the same rank list; members must create groups that
// share two or more ranks in the same order.
class CommGroup {
 public:
  virtual ~CommGroup() = default;
  virtual const std::vector<int>& ranks() const = 0;  // ascending world ranks
  int size() const { return static_cast<int>(ranks().size()); }
  // This rank's position in ranks().
  virtual int index() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  virtual std::string name() const = 0;  // "mpi", "nccl"
  // Host name of a rank (for grouping ranks into topology levels).
  virtual std::string host_of(int rank) const = 0;

  // --- point to point --------------------------------------------------
  // Tags are the caller's: any value in [0, max_tag()]. Messages between
  // the same pair with the same tag arrive in the order they were sent;
  // different tags may be received in any order.
  // The tensor must stay unmodified until the request completes (the
  // request keeps its storage alive). `meta` travels with the data.
  virtual Request isend(const Tensor& t, int peer, int tag, int64_t meta = 0) = 0;
  // Receive into `into` (shape is checked against the sender's: a mismatch
  // is a RuntimeFailure naming both shapes).
  virtual Request irecv(Tensor into, int peer, int tag) = 0;
  // Receive a tensor of whatever shape/dtype the sender sends (allocated
  // on arrival, on the host); read it with Request::tensor().
  virtual Request irecv_any(int peer, int tag) = 0;
  virtual int max_tag() const = 0;

  // --- groups and all-reduce --------------------------------------------
  // Every member calls make_group with the same ranks (any order; the group
  // sorts them). Local: no communication, cannot hang.
  virtual std::shared_ptr<CommGroup> make_group(std::vector<int> ranks) = 0;
  std::shared_ptr<CommGroup> world_group();

  // In-place all-reduce of f32 tensors over a group. Several tensors in one
  // call form one bucket (one message exchange). Deterministic: every
  // element is reduced as ((x_0 + x_1) + x_2) + ... in the group's rank
  // order, and Average then divides by the group size — bitwise the same
  // result on every member and whatever order the data arrives in
  // (reduce_in_rank_order() below is the exact arithmetic, for a
  // single-process reference). All members must issue their all-reduces on
  // a group in the same order with the same tensor sizes.
  virtual Request iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) = 0;
  void all_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op);

  virtual void barrier(CommGroup& g);
  void barrier();  // all ranks

  // --- failure and shutdown -----------------------------------------------
  // Seconds a wait may take before it throws (the executor's --timeout).
  virtual void set_timeout(double seconds) = 0;
  virtual double timeout() const = 0;
  // Ends the whole job, non-zero. Never returns.
  [[noreturn]] virtual void abort(const std::string& reason, int exit_code = 1) = 0;

  // Ctrl-C / SIGTERM: true once this process received one (local, cheap,
  // async-signal-safe flag). The executor polls it between actions.
  static bool stop_requested();
  // Collective over all ranks: true on every rank when any rank has
  // stop_requested(). Call it at the same point on all ranks (e.g. every
  // N minibatches) so all of them stop after the same minibatch.
  bool any_rank_stopping();

 private:
  std::shared_ptr<CommGroup> world_;
};

// Installs SIGINT/SIGTERM handlers that set stop_requested(); a second
// signal ends the process at once. Idempotent.
void install_stop_signal_handlers();

// For transports: what this rank is, and what it is blocked on (nullptr:
// nothing), so a SIGTERM from the launcher (which is how mpirun ends the
// others when one rank dies) can still say which peer we were waiting for.
void note_rank_for_signals(int rank);
void note_blocked_on(const char* what);

// The exact arithmetic of an all-reduce over n inputs of `count` floats:
// out[e] = ((in[0][e] + in[1][e]) + ...) (then / n for Average).
// `out` may alias in[0].
void reduce_in_rank_order(const std::vector<const float*>& in, float* out, size_t count,
                          ReduceOp op);

// True when this process was started by an MPI launcher (mpirun, srun with
// PMI/PMIx): decided from the launcher's environment, before MPI_Init.
bool launched_under_mpi();

// CPU seconds this process's communication threads (the MPI engine's
// pd-comm, the shared-memory engine's pd-shm) have used so far: the CPU a
// transfer takes from compute on shared cores, whatever the caller's thread
// does while it waits. 0 where /proc is not readable.
double comm_threads_cpu_s();

}  // namespace pd
