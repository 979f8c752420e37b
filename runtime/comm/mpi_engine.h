#pragma once
// The MPI transport's engine: the communication thread that owns every MPI
// call after initialization (see mpi_transport.h for why one thread), and
// MpiOp, the base of its non-blocking operations (mpi_p2p.h,
// mpi_allreduce.h). Internal to runtime/comm/.
//
// Include after <mpi.h> (with OMPI_SKIP_MPICXX defined).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "runtime/comm/mpi_check.h"
#include "runtime/comm/transport.h"

namespace pd {

using MpiClock = std::chrono::steady_clock;

constexpr int kAbortTag = 1;  // on the control communicator: "rank N stops because ..."
constexpr int kAbortTextBytes = 512;

// "[0, 2, 5]"
std::string ranks_text(const std::vector<int>& ranks);
// bytes as an MPI count; a RuntimeFailure past the 2 GiB of one message.
int checked_count(size_t bytes, const char* what);

class MpiOp;

// The communication thread. Everything named *_locked or called from a
// command runs on it; submit/wait/test are for any other thread.
class MpiEngine {
 public:
  MpiEngine(int rank, double timeout_s);

  ~MpiEngine() { stop(false); }

  // Ends the thread; with `drain`, first lets in-flight operations finish
  // (bounded by the timeout).
  void stop(bool drain) {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lk(queue_mu_);
      stopping_ = true;
      drain_ = drain;
    }
    queue_cv_.notify_all();
    thread_.join();
  }

  // Cancels the abort-notice receive and frees the communicators.
  void finalize_comms();

  void submit(std::function<void()> fn) {
    {
      std::lock_guard lk(queue_mu_);
      queue_.push_back(std::move(fn));
    }
    queue_cv_.notify_one();
  }

  // Comm thread: registers an MPI request belonging to op (slot index).
  void watch(std::shared_ptr<MpiOp> op, MPI_Request r, int slot) {
    reqs_.push_back(r);
    owners_.push_back({std::move(op), slot});
  }

  // Comm thread: receives from one (peer, tag) take turns, because each is
  // a header message then a payload message: a receive holds the channel
  // from posting its header receive until it has posted its payload
  // receive, so two receives in flight never swap each other's messages.
  void acquire_channel(int peer, int tag, std::function<void()> start) {
    Channel& c = channels_[{peer, tag}];
    if (c.busy) {
      c.waiting.push_back(std::move(start));
      return;
    }
    c.busy = true;
    start();
  }
  void release_channel(int peer, int tag) {
    auto it = channels_.find({peer, tag});
    PD_CHECK(it != channels_.end() && it->second.busy);
    if (it->second.waiting.empty()) {
      channels_.erase(it);
      return;
    }
    auto next = std::move(it->second.waiting.front());
    it->second.waiting.pop_front();
    next();
  }

  void finish(MpiOp& op, std::string error);
  bool test(MpiOp& op);
  void wait(MpiOp& op, double timeout_s);

  std::string failure() {
    std::lock_guard lk(done_mu_);
    return failure_;
  }
  void set_failure(const std::string& f) {
    {
      std::lock_guard lk(done_mu_);
      if (failure_.empty()) failure_ = f;
    }
    done_cv_.notify_all();
  }

  // Comm thread: tells every other rank why we stop, for up to `grace`.
  void notify_peers(const std::string& reason, int world, std::chrono::milliseconds grace);

  // Posts op's requests on the communication thread; a failure to post
  // fails the op (its waiter throws) rather than the thread.
  Request launch(std::shared_ptr<MpiOp> op);

  int rank_;
  std::atomic<double> timeout_s_;
  int tag_ub_ = 32767;
  MPI_Comm p2p_ = MPI_COMM_NULL, coll_ = MPI_COMM_NULL, ctrl_ = MPI_COMM_NULL;
  std::atomic<bool> peers_notified_{false};

 private:
  void loop();
  void run_commands_and_progress(std::deque<std::function<void()>>& cmds, int& handled);
  void cancel_unmatched_receives();
  int progress();
  void on_abort_notice(const MPI_Status& st);

  struct Owner {
    std::shared_ptr<MpiOp> op;
    int slot;
  };

  std::thread thread_;
  std::mutex queue_mu_;
  std::condition_variable queue_cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  bool drain_ = true;
  bool receives_cancelled_ = false;
  std::atomic<int> waiters_{0};
  std::atomic<int64_t> last_wait_start_ns_{0};

  // Comm-thread state.
  struct Channel {
    bool busy = false;
    std::deque<std::function<void()>> waiting;
  };
  std::map<std::pair<int, int>, Channel> channels_;
  std::vector<MPI_Request> reqs_;
  std::vector<Owner> owners_;
  std::vector<int> done_idx_;
  std::vector<MPI_Status> statuses_;
  MPI_Request abort_req_ = MPI_REQUEST_NULL;
  char abort_in_[kAbortTextBytes] = {};

  std::mutex done_mu_;
  std::condition_variable done_cv_;
  std::string failure_;  // set when a peer aborted; every wait throws it
};

// One non-blocking operation: a few MPI requests and what to do as each
// completes. Slots record the peer of every request so a timeout can name
// the rank that has not delivered.
class MpiOp : public RequestState, public std::enable_shared_from_this<MpiOp> {
 public:
  MpiOp(MpiEngine& e, std::string what) : eng_(e), what_(std::move(what)) {}

  bool test() override { return eng_.test(*this); }
  void wait(double timeout_s) override { eng_.wait(*this, timeout_s); }

  virtual void start() = 0;                                    // comm thread
  virtual void on_request_done(int slot, const MPI_Status& st) = 0;  // comm thread

  // Comm thread: posts a request and remembers its peer.
  void track(MPI_Request r, int peer, bool is_recv) {
    int slot = static_cast<int>(peers_.size());
    peers_.push_back(peer);
    pending_.push_back(1);
    recv_.push_back(is_recv);
    ++outstanding_;
    eng_.watch(shared_from_this(), r, slot);
  }
  // Comm thread: request `slot` completed with status st.
  void handle(int slot, const MPI_Status& st) {
    pending_[slot] = 0;
    --outstanding_;
    if (finished_) return;
    if (st.MPI_ERROR != MPI_SUCCESS) {
      fail(cat(what_, " with rank ", peers_[slot], ": ", mpi_error_text(st.MPI_ERROR)));
      return;
    }
    int cancelled = 0;
    PD_MPI_CHECK_FOR(what_, MPI_Test_cancelled(&st, &cancelled));
    if (cancelled) {
      fail(cat(what_, ": cancelled at shutdown"));
      return;
    }
    on_request_done(slot, st);
    update_waiting_peer();
  }
  bool slot_is_recv(int slot) const { return recv_[slot]; }
  void fail(const std::string& msg) {
    if (finished_) return;
    finished_ = true;
    on_finished();
    eng_.finish(*this, msg);
  }
  void succeed() {
    finished_ = true;
    on_finished();
    eng_.finish(*this, "");
  }
  virtual void on_finished() {}
  // The rank a waiter is blocked on: the first peer whose data has not
  // arrived, else the first that has not taken ours.
  void update_waiting_peer() {
    int send_peer = -1;
    for (size_t i = 0; i < peers_.size(); ++i) {
      if (!pending_[i]) continue;
      if (recv_[i]) {
        waiting_peer_ = peers_[i];
        return;
      }
      if (send_peer < 0) send_peer = peers_[i];
    }
    if (send_peer >= 0) waiting_peer_ = send_peer;
  }

  MpiEngine& eng_;
  std::string what_;
  std::atomic<int> waiting_peer_{-1};
  // Guarded by the engine's done mutex.
  std::atomic<bool> done_{false};  // written under the mutex, read lock-free
  std::string error_;

 protected:
  int outstanding_ = 0;
  bool finished_ = false;

 private:
  std::vector<int> peers_;
  std::vector<char> pending_, recv_;
};

}  // namespace pd
