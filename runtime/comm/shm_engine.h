#pragma once
// The same-host path of the MPI transport: ranks of one host exchange
// tensors through a shared-memory segment of their own (shm_segment.h)
// instead of MPI, so its speed does not depend on how MPI's shared-memory
// transport is configured (e.g. OMPI_MCA_btl_vader_single_copy_mechanism=none,
// which containers often set, makes Open MPI 20x slower for large messages).
// Internal to runtime/comm/; MpiTransport decides which peers use it.
//
// A send that fits the ring with nothing queued ahead of it is written on
// the caller's thread. One progress thread per process moves the rest: it
// writes queued sends into the ring to their peer (in chunks, publishing as
// it goes, so the receiver copies out while the sender copies in) and
// copies arriving messages out of the rings into the receives they match.
// It spins briefly after traffic and otherwise sleeps on its futex
// doorbell, which a peer (or a local submit) rings only when that thread
// has something to do (the rings' reader_wants and writer_wants flags). A
// receive being waited on is taken on the caller's thread: it polls its
// peer's ring, then sleeps on the ring's reader_seq, which the sender
// wakes directly.
//
// Matching is the transport's contract: messages of one (peer, tag) in send
// order, receives of one (peer, tag) in posting order, tags in any order.
// A tensor receive is taken (posted to the matching) when its owner first
// tests or waits on it, and copied out on the owner's thread when its
// message is in the ring whole: what a worker holds follows its own
// actions. A message is left in the ring while no taken receive from that
// peer wants it (so a send larger than the ring completes once the
// receiver takes it, as an MPI rendezvous does), and buffered when a taken
// receive from that peer waits for a different tag behind it. Waiting on a
// send takes every receive first, so no peer hangs on a receive nobody
// asked for yet.
//
// The all-reduce is the MPI transport's arithmetic (transport.h): chunk k
// is owned by member k, which adds the members' parts in rank order as
// they stream out of the rings (the first two operands commute exactly),
// then sends the result to every member. Bitwise the same as
// reduce_in_rank_order.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/comm/shm_segment.h"
#include "runtime/comm/transport.h"

namespace pd {

class ShmEngineImpl;

class ShmEngine {
 public:
  // `local_of[world rank]`: the rank's index in the segment, -1 if on
  // another host. `failure()` returns a non-empty reason once the job is
  // failing (a peer aborted): every wait then throws it. `core_handoff`:
  // a wait about to sleep hands its core to a queued rank (core_handoff.h);
  // the constructing thread is taken to be the one running the rank's
  // actions.
  ShmEngine(ShmSegment segment, int world_rank, std::vector<int> local_of, double timeout_s,
            std::function<std::string()> failure, bool core_handoff);
  ~ShmEngine();

  bool reaches(int world_rank) const;
  Request send(const Tensor& t, int peer, int tag, int64_t meta);
  Request recv(Tensor into, int peer, int tag);  // into undefined: any shape
  // group_ranks ascending, all reachable; `tag` unique per all-reduce of
  // the group (the same on every member).
  Request all_reduce(const std::vector<int>& group_ranks, int my_index, int64_t tag, std::vector<Tensor> tensors,
                     ReduceOp op);

  void set_timeout(double s);
  // Ends the thread; with `drain`, in-flight sends first finish (bounded
  // by the timeout) and receives nobody matched fail "cancelled at
  // shutdown".
  void stop(bool drain);
  uint64_t ring_bytes() const;

 private:
  std::unique_ptr<ShmEngineImpl> impl_;
};

}  // namespace pd
