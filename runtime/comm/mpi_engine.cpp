// The MPI transport's engine: the communication thread, its requests and
// how it polls. See mpi_transport.h for why one thread owns MPI.

// C API only: Open MPI's mpi.h would otherwise drag in the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstring>

#include "runtime/comm/mpi_engine.h"
#include "core/error.h"
#include "core/text.h"

namespace pd {

std::string mpi_error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return cat("MPI error code ", code);
  return std::string(buf, static_cast<size_t>(len));
}

std::string mpi_failure_text(int code, const char* call, const char* file, int line) {
  // The function's name is enough; its arguments are on that line.
  std::string name(call);
  name = name.substr(0, name.find('('));
  // Paths from the repository root, however the build spelled them.
  std::string where(file);
  const size_t root = where.rfind("runtime/");
  if (root != std::string::npos) where = where.substr(root);
  return cat(name, " failed at ", where, ":", line, ": ", mpi_error_text(code));
}

std::string ranks_text(const std::vector<int>& r) {
  std::string s = "[";
  for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s + "]";
}

int checked_count(size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX))
    throw RuntimeFailure(cat(what, " of ", bytes_text(static_cast<double>(bytes)),
                             " exceeds the 2 GiB limit of one MPI message; split the tensor"));
  return static_cast<int>(bytes);
}

MpiEngine::MpiEngine(int rank, double timeout_s) : rank_(rank), timeout_s_(timeout_s) {
  PD_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &p2p_));
  PD_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &coll_));
  PD_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &ctrl_));
  for (MPI_Comm c : {p2p_, coll_, ctrl_}) PD_MPI_CHECK(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN));
  void* ub = nullptr;
  int found = 0;
  PD_MPI_CHECK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found));
  tag_ub_ = found ? *static_cast<int*>(ub) : 32767;
  PD_MPI_CHECK(MPI_Irecv(abort_in_, kAbortTextBytes, MPI_CHAR, MPI_ANY_SOURCE, kAbortTag, ctrl_, &abort_req_));
  thread_ = std::thread([this] {
    pthread_setname_np(pthread_self(), "pd-comm");  // so top and perf tell it from the compute thread
    loop();
  });
}

void MpiEngine::finalize_comms() {
  if (abort_req_ != MPI_REQUEST_NULL) {
    PD_MPI_CHECK(MPI_Cancel(&abort_req_));
    PD_MPI_CHECK(MPI_Wait(&abort_req_, MPI_STATUS_IGNORE));
  }
  for (MPI_Comm* c : {&p2p_, &coll_, &ctrl_}) PD_MPI_CHECK(MPI_Comm_free(c));
}

void MpiEngine::notify_peers(const std::string& reason, int world, std::chrono::milliseconds grace) {
  std::string text = reason.substr(0, kAbortTextBytes - 1);
  std::vector<char> buf(text.begin(), text.end());
  buf.push_back('\0');
  std::vector<MPI_Request> sends;
  // The job is ending on an error already: a notice that cannot be posted
  // or completed is skipped, not reported.
  for (int r = 0; r < world; ++r) {
    if (r == rank_) continue;
    MPI_Request q;
    if (MPI_Isend(buf.data(), static_cast<int>(buf.size()), MPI_CHAR, r, kAbortTag, ctrl_, &q) == MPI_SUCCESS)
      sends.push_back(q);
  }
  auto deadline = MpiClock::now() + grace;
  int all_done = 0;
  while (!sends.empty() && MpiClock::now() < deadline) {
    if (MPI_Testall(static_cast<int>(sends.size()), sends.data(), &all_done, MPI_STATUSES_IGNORE) != MPI_SUCCESS)
      break;
    if (all_done) break;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  // Unfinished sends (to a dead rank) are abandoned: the job is ending.
}

Request MpiEngine::launch(std::shared_ptr<MpiOp> op) {
  submit([op] {
    try {
      op->start();
      op->update_waiting_peer();
    } catch (const std::exception& e) {
      op->fail(e.what());
    }
  });
  return Request(op);
}

// A failed MPI call on the communication thread outside any one operation
// (testing requests, cancelling at shutdown) fails the engine: every wait
// throws it, and the rank aborts naming it, instead of the thread dying.
void MpiEngine::run_commands_and_progress(std::deque<std::function<void()>>& cmds, int& handled) {
  try {
    for (auto& c : cmds) c();
    handled = progress();
  } catch (const std::exception& e) {
    set_failure(cat("rank ", rank_, ": ", e.what()));
  }
}

// Shutdown: receives nobody will match are cancelled (their ops report
// "cancelled at shutdown") rather than waited for until the timeout.
void MpiEngine::cancel_unmatched_receives() {
  try {
    for (size_t i = 0; i < reqs_.size(); ++i)
      if (owners_[i].op->slot_is_recv(owners_[i].slot)) PD_MPI_CHECK(MPI_Cancel(&reqs_[i]));
  } catch (const std::exception& e) {
    set_failure(cat("rank ", rank_, ": ", e.what()));
  }
}

void MpiEngine::finish(MpiOp& op, std::string error) {
  {
    std::lock_guard lk(done_mu_);
    op.done_ = true;
    op.error_ = std::move(error);
  }
  done_cv_.notify_all();
}

bool MpiEngine::test(MpiOp& op) {
  std::lock_guard lk(done_mu_);
  if (op.done_ && !op.error_.empty()) throw RuntimeFailure(op.error_);
  if (!op.done_ && !failure_.empty()) throw RuntimeFailure(failure_);
  return op.done_;
}

void MpiEngine::wait(MpiOp& op, double timeout_s) {
  if (timeout_s < 0) timeout_s = timeout_s_.load();
  const auto start = MpiClock::now();
  const auto deadline = start + std::chrono::duration_cast<MpiClock::duration>(
                                    std::chrono::duration<double>(timeout_s));
  if (op.done_.load(std::memory_order_acquire)) {
    std::lock_guard lk(done_mu_);
    if (!op.error_.empty()) throw RuntimeFailure(op.error_);
    return;
  }
  // Tell the comm thread someone is blocked (it polls hot for a moment,
  // then every <= 100 us), then spin briefly: a reply that is microseconds
  // away should not pay for a futex sleep and wake-up on both sides.
  waiters_.fetch_add(1);
  {
    std::lock_guard q(queue_mu_);  // so the wake-up cannot slip between its check and its sleep
    last_wait_start_ns_.store(start.time_since_epoch().count());
  }
  queue_cv_.notify_one();
  const auto spin_until = start + std::chrono::microseconds(30);
  while (!op.done_.load(std::memory_order_acquire) && MpiClock::now() < spin_until) sched_yield();
  std::unique_lock lk(done_mu_);
  if (op.done_) {
    waiters_.fetch_sub(1);
    if (!op.error_.empty()) throw RuntimeFailure(op.error_);
    return;
  }
  note_blocked_on(cat("waiting for rank ", op.waiting_peer_.load(), " (", op.what_, ")").c_str());
  struct Leave {
    MpiEngine* e;
    ~Leave() {
      e->waiters_.fetch_sub(1);
      note_blocked_on(nullptr);
    }
  } leave{this};
  while (!op.done_) {
    if (!failure_.empty()) throw RuntimeFailure(failure_);
    if (MpiClock::now() >= deadline) {
      int peer = op.waiting_peer_.load();
      char secs[32];
      snprintf(secs, sizeof secs, "%g", timeout_s);
      throw RuntimeFailure(cat("rank ", rank_, ": timed out after ", secs, " s waiting for rank ",
                               peer, " (", op.what_,
                               "); that rank is silent: dead, hung or behind. Raise --timeout if "
                               "it is only slow."));
    }
    done_cv_.wait_until(lk, std::min(deadline, MpiClock::now() + std::chrono::milliseconds(100)));
  }
  if (!op.error_.empty()) throw RuntimeFailure(op.error_);
}

int MpiEngine::progress() {
  int handled = 0;
  if (abort_req_ != MPI_REQUEST_NULL) {
    int flag = 0;
    MPI_Status st;
    PD_MPI_CHECK(MPI_Test(&abort_req_, &flag, &st));
    if (flag) on_abort_notice(st);
  }
  if (reqs_.empty()) return handled;
  const int n = static_cast<int>(reqs_.size());
  done_idx_.resize(n);
  statuses_.resize(n);
  int outcount = 0;
  // MPI_ERR_IN_STATUS is no failure of the call: some requests completed
  // with an error, which their statuses carry to their ops (handle()).
  const int rc = MPI_Testsome(n, reqs_.data(), &outcount, done_idx_.data(), statuses_.data());
  if (rc != MPI_ERR_IN_STATUS) PD_MPI_CHECK(rc);
  if (outcount == MPI_UNDEFINED || outcount <= 0) return handled;
  for (int k = 0; k < outcount; ++k) {
    Owner& o = owners_[done_idx_[k]];
    auto op = o.op;  // handle() may post new requests (appending to owners_)
    int slot = o.slot;
    o.op.reset();
    try {
      op->handle(slot, statuses_[k]);
    } catch (const std::exception& e) {
      op->fail(e.what());
    }
  }
  // Drop completed entries (MPI set them to MPI_REQUEST_NULL).
  size_t w = 0;
  for (size_t r = 0; r < reqs_.size(); ++r) {
    if (reqs_[r] == MPI_REQUEST_NULL) continue;
    reqs_[w] = reqs_[r];
    owners_[w] = std::move(owners_[r]);
    ++w;
  }
  reqs_.resize(w);
  owners_.resize(w);
  return handled + outcount;
}

void MpiEngine::on_abort_notice(const MPI_Status& st) {
  abort_in_[kAbortTextBytes - 1] = '\0';
  std::string text = abort_in_;
  const std::string prefix = cat("rank ", st.MPI_SOURCE, ": ");
  if (text.rfind(prefix, 0) == 0) text = text.substr(prefix.size());
  std::string msg = cat("rank ", st.MPI_SOURCE, " aborted: ", text);
  fprintf(stderr, "pipedream: rank %d: stopping because %s\n", rank_, msg.c_str());
  fflush(stderr);
  set_failure(msg);
}

void MpiEngine::loop() {
  using namespace std::chrono;
  auto last_activity = MpiClock::now();
  constexpr auto kFirstNap = microseconds(25) / 2;  // doubled before the first nap
  constexpr auto kHotAfterWait = microseconds(50);
  auto nap = duration_cast<MpiClock::duration>(kFirstNap);
  for (;;) {
    std::deque<std::function<void()>> cmds;
    bool stopping, drain;
    {
      std::lock_guard lk(queue_mu_);
      cmds.swap(queue_);
      stopping = stopping_;
      drain = drain_;
    }
    int handled = 0;
    run_commands_and_progress(cmds, handled);
    if (stopping && cmds.empty()) {
      // Normal shutdown: receives nobody will match are cancelled; sends
      // in flight may finish (bounded by the timeout), then leave.
      if (reqs_.empty() || !drain) break;
      if (!receives_cancelled_) {
        receives_cancelled_ = true;
        cancel_unmatched_receives();
      }
      if (MpiClock::now() - last_activity > duration<double>(timeout_s_.load())) break;
    }
    const auto now = MpiClock::now();
    if (handled > 0 || !cmds.empty()) {
      last_activity = now;
      nap = duration_cast<MpiClock::duration>(kFirstNap);
      continue;
    }
    // Open MPI makes no progress unless called, and on a box where every
    // core runs compute, each poll is CPU taken from compute (a wake-up
    // costs 5-20 us of CPU on the shared 2-core VM). So: poll hot
    // (sched_yield) only while someone is blocked in wait() and the wait
    // just began or traffic just moved; otherwise sleep, backing off from
    // 25 us
    //  - while someone waits: to 1/16 of how long they have waited, within
    //    [100 us, 2 ms] - the latency this adds to a wait stays a small
    //    fraction of it (a stage that waited 32 ms for a slower one has that
    //    much slack), and a long wait costs tens of wake-ups, not hundreds;
    //  - while only requests nobody waits for are open: to 2 ms. With
    //    shared memory the receiver pulls the data (CMA) when it polls, so
    //    a receive not yet needed can wait; a wait wakes us at once;
    //  - idle (only the abort-notice receive open): 100 ms. Ranks on one
    //    host move their tensors through ShmEngine, so this thread idles
    //    through a whole run there; at 10 ms its wake-ups (each an
    //    MPI_Test, which polls every transport and yields) took 1-2% of a
    //    core per rank from compute on a shared 2-core host. An abort
    //    notice waits at most this long, which nobody notices.
    const bool waiting = waiters_.load() > 0;
    auto cap = duration_cast<MpiClock::duration>(reqs_.empty() ? microseconds(100000) : microseconds(2000));
    if (waiting) {
      const auto since_wait = nanoseconds(now.time_since_epoch().count() - last_wait_start_ns_.load());
      if (since_wait < kHotAfterWait || now - last_activity < kHotAfterWait) {
        sched_yield();
        continue;
      }
      cap = std::clamp<MpiClock::duration>(since_wait / 16, microseconds(100), microseconds(2000));
    }
    nap = std::min<MpiClock::duration>(nap * 2, cap);
    const int64_t seen_wait = last_wait_start_ns_.load();
    std::unique_lock lk(queue_mu_);
    queue_cv_.wait_for(lk, nap, [&] {
      return !queue_.empty() || stopping_ != stopping || last_wait_start_ns_.load() != seen_wait;
    });
  }
}

}  // namespace pd
