// MpiTransport: requests, the communication thread, and the deterministic
// all-reduce. See mpi_transport.h for why one thread owns MPI.
#include "runtime/comm/mpi_transport.h"

// C API only: Open MPI's mpi.h would otherwise drag in the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/text.h"

namespace pd {
namespace {

using Clock = std::chrono::steady_clock;

// Every point-to-point tensor travels as a fixed header (shape, dtype,
// `meta`) on the sender's (peer, tag). A small tensor rides in the same
// message, after the header (one message, one match, one completion); a
// larger one follows as a second message, so the receiver can check the
// shape or allocate before the data lands where it belongs.
constexpr int32_t kHeaderMagic = 0x32544450;  // "PDT2"
constexpr int kMaxDims = 8;
constexpr int32_t kPayloadInline = 1;
struct WireHeader {
  int32_t magic = kHeaderMagic;
  int32_t dtype = 0;
  int32_t ndim = 0;
  int32_t flags = 0;  // kPayloadInline
  int64_t dims[kMaxDims] = {};
  int64_t meta = 0;
};
// Header plus inline payload stays within Open MPI's shared-memory eager
// size (4 KiB with its own header), so a small tensor costs one copy in
// and one out, no rendezvous.
constexpr int kInlineBytes = 4096 - 256;
struct WireMessage {
  WireHeader header;
  char payload[kInlineBytes];
};

constexpr int kAbortTag = 1;
constexpr int kAbortTextBytes = 512;
constexpr int kSeqBits = 16;  // all-reduce tags: key | phase | sequence

std::string ranks_text(const std::vector<int>& r) {
  std::string s = "[";
  for (size_t i = 0; i < r.size(); ++i) s += (i ? ", " : "") + std::to_string(r[i]);
  return s + "]";
}

std::string mpi_error_text(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, len);
}

int checked_count(size_t bytes, const char* what) {
  if (bytes > static_cast<size_t>(INT_MAX))
    throw RuntimeFailure(cat(what, " of ", bytes_text(static_cast<double>(bytes)),
                             " exceeds the 2 GiB limit of one MPI message; split the tensor"));
  return static_cast<int>(bytes);
}

}  // namespace

class MpiOp;

// The communication thread. Everything named *_locked or called from a
// command runs on it; submit/wait/test are for any other thread.
class MpiEngine {
 public:
  MpiEngine(int rank, double timeout_s) : rank_(rank), timeout_s_(timeout_s) {
    MPI_Comm_dup(MPI_COMM_WORLD, &p2p_);
    MPI_Comm_dup(MPI_COMM_WORLD, &coll_);
    MPI_Comm_dup(MPI_COMM_WORLD, &ctrl_);
    for (MPI_Comm c : {p2p_, coll_, ctrl_}) MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    void* ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
    tag_ub_ = found ? *static_cast<int*>(ub) : 32767;
    MPI_Irecv(abort_in_, kAbortTextBytes, MPI_CHAR, MPI_ANY_SOURCE, kAbortTag, ctrl_, &abort_req_);
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "pd-comm");  // so top and perf tell it from the compute thread
      loop();
    });
  }

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

  void finalize_comms() {
    if (abort_req_ != MPI_REQUEST_NULL) {
      MPI_Cancel(&abort_req_);
      MPI_Wait(&abort_req_, MPI_STATUS_IGNORE);
    }
    for (MPI_Comm* c : {&p2p_, &coll_, &ctrl_}) MPI_Comm_free(c);
  }

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
  void notify_peers(const std::string& reason, int world, std::chrono::milliseconds grace) {
    std::string text = reason.substr(0, kAbortTextBytes - 1);
    std::vector<char> buf(text.begin(), text.end());
    buf.push_back('\0');
    std::vector<MPI_Request> sends;
    for (int r = 0; r < world; ++r) {
      if (r == rank_) continue;
      MPI_Request q;
      if (MPI_Isend(buf.data(), static_cast<int>(buf.size()), MPI_CHAR, r, kAbortTag, ctrl_, &q) ==
          MPI_SUCCESS)
        sends.push_back(q);
    }
    auto deadline = Clock::now() + grace;
    int all_done = 0;
    while (!sends.empty() && Clock::now() < deadline) {
      MPI_Testall(static_cast<int>(sends.size()), sends.data(), &all_done, MPI_STATUSES_IGNORE);
      if (all_done) break;
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    // Unfinished sends (to a dead rank) are abandoned: the job is ending.
  }

  int rank_;
  std::atomic<double> timeout_s_;
  int tag_ub_ = 32767;
  MPI_Comm p2p_ = MPI_COMM_NULL, coll_ = MPI_COMM_NULL, ctrl_ = MPI_COMM_NULL;
  std::atomic<bool> peers_notified_{false};

 private:
  void loop();
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
  void handle(int slot, const MPI_Status& st) {
    pending_[slot] = 0;
    --outstanding_;
    if (finished_) return;
    if (st.MPI_ERROR != MPI_SUCCESS) {
      fail(cat(what_, " with rank ", peers_[slot], ": ", mpi_error_text(st.MPI_ERROR)));
      return;
    }
    int cancelled = 0;
    MPI_Test_cancelled(&st, &cancelled);
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
  void check_posted(int rc, int peer) {
    if (rc != MPI_SUCCESS) throw RuntimeFailure(cat(what_, " with rank ", peer, ": ", mpi_error_text(rc)));
  }

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
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
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
  while (!op.done_.load(std::memory_order_acquire) && Clock::now() < spin_until) sched_yield();
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
    if (Clock::now() >= deadline) {
      int peer = op.waiting_peer_.load();
      char secs[32];
      snprintf(secs, sizeof secs, "%g", timeout_s);
      throw RuntimeFailure(cat("rank ", rank_, ": timed out after ", secs, " s waiting for rank ",
                               peer, " (", op.what_,
                               "); that rank is silent: dead, hung or behind. Raise --timeout if "
                               "it is only slow."));
    }
    done_cv_.wait_until(lk, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
  }
  if (!op.error_.empty()) throw RuntimeFailure(op.error_);
}

int MpiEngine::progress() {
  int handled = 0;
  if (abort_req_ != MPI_REQUEST_NULL) {
    int flag = 0;
    MPI_Status st;
    MPI_Test(&abort_req_, &flag, &st);
    if (flag) on_abort_notice(st);
  }
  if (reqs_.empty()) return handled;
  const int n = static_cast<int>(reqs_.size());
  done_idx_.resize(n);
  statuses_.resize(n);
  int outcount = 0;
  MPI_Testsome(n, reqs_.data(), &outcount, done_idx_.data(), statuses_.data());
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
  auto last_activity = Clock::now();
  constexpr auto kFirstNap = microseconds(25) / 2;  // doubled before the first nap
  constexpr auto kHotAfterWait = microseconds(50);
  auto nap = duration_cast<Clock::duration>(kFirstNap);
  for (;;) {
    std::deque<std::function<void()>> cmds;
    bool stopping, drain;
    {
      std::lock_guard lk(queue_mu_);
      cmds.swap(queue_);
      stopping = stopping_;
      drain = drain_;
    }
    for (auto& c : cmds) c();
    int handled = progress();
    if (stopping && cmds.empty()) {
      // Normal shutdown: receives nobody will match are cancelled; sends
      // in flight may finish (bounded by the timeout), then leave.
      if (reqs_.empty() || !drain) break;
      if (!receives_cancelled_) {
        receives_cancelled_ = true;
        for (size_t i = 0; i < reqs_.size(); ++i)
          if (owners_[i].op->slot_is_recv(owners_[i].slot)) MPI_Cancel(&reqs_[i]);
      }
      if (Clock::now() - last_activity > duration<double>(timeout_s_.load())) break;
    }
    const auto now = Clock::now();
    if (handled > 0 || !cmds.empty()) {
      last_activity = now;
      nap = duration_cast<Clock::duration>(kFirstNap);
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
    //  - idle (only the abort-notice receive open): 10 ms.
    const bool waiting = waiters_.load() > 0;
    auto cap = duration_cast<Clock::duration>(reqs_.empty() ? microseconds(10000) : microseconds(2000));
    if (waiting) {
      const auto since_wait = nanoseconds(now.time_since_epoch().count() - last_wait_start_ns_.load());
      if (since_wait < kHotAfterWait || now - last_activity < kHotAfterWait) {
        sched_yield();
        continue;
      }
      cap = std::clamp<Clock::duration>(since_wait / 16, microseconds(100), microseconds(2000));
    }
    nap = std::min<Clock::duration>(nap * 2, cap);
    const int64_t seen_wait = last_wait_start_ns_.load();
    std::unique_lock lk(queue_mu_);
    queue_cv_.wait_for(lk, nap, [&] {
      return !queue_.empty() || stopping_ != stopping || last_wait_start_ns_.load() != seen_wait;
    });
  }
}

namespace {

void fill_header(WireHeader& h, const Tensor& t, int64_t meta) {
  PD_CHECK(t.ndim() <= kMaxDims, "tensors of more than ", kMaxDims, " dims cannot be sent");
  h.dtype = static_cast<int32_t>(t.dtype());
  h.ndim = t.ndim();
  for (int i = 0; i < t.ndim(); ++i) h.dims[i] = t.shape()[i];
  h.meta = meta;
}

class SendOp final : public MpiOp {
 public:
  SendOp(MpiEngine& e, Tensor t, int peer, int tag, int64_t meta)
      : MpiOp(e, cat("send tag ", tag, " ", shape_str(t.shape()), " ", dtype_name(t.dtype()),
                     " to rank ", peer)),
        t_(t.device().is_cpu() ? t : t.to(Device::cpu())),  // host staging
        peer_(peer),
        tag_(tag) {
    bytes_ = checked_count(t_.nbytes(), "message");
    wire_ = std::make_unique<WireMessage>();
    fill_header(wire_->header, t_, meta);
    if (bytes_ <= kInlineBytes) {
      wire_->header.flags = kPayloadInline;
      if (bytes_ > 0) std::memcpy(wire_->payload, t_.raw(), static_cast<size_t>(bytes_));
      t_ = Tensor{};  // copied: the caller may reuse its tensor at once
    }
    waiting_peer_ = peer;
  }
  void start() override {
    MPI_Request r;
    const bool inline_payload = wire_->header.flags & kPayloadInline;
    const int head = static_cast<int>(sizeof(WireHeader)) + (inline_payload ? bytes_ : 0);
    check_posted(MPI_Isend(wire_.get(), head, MPI_BYTE, peer_, tag_, eng_.p2p_, &r), peer_);
    track(r, peer_, false);
    if (!inline_payload) {
      check_posted(MPI_Isend(t_.raw(), bytes_, MPI_BYTE, peer_, tag_, eng_.p2p_, &r), peer_);
      track(r, peer_, false);
    }
  }
  void on_request_done(int, const MPI_Status&) override {
    if (outstanding_ == 0) succeed();
  }

 private:
  Tensor t_;
  std::unique_ptr<WireMessage> wire_;
  int peer_, tag_, bytes_ = 0;
};

class RecvOp final : public MpiOp {
 public:
  RecvOp(MpiEngine& e, Tensor into, int peer, int tag)
      : MpiOp(e, cat("receive tag ", tag, " from rank ", peer)), into_(into), peer_(peer), tag_(tag) {
    waiting_peer_ = peer;
  }
  void start() override {
    auto self = std::static_pointer_cast<RecvOp>(shared_from_this());
    eng_.acquire_channel(peer_, tag_, [self] {
      self->holds_channel_ = true;
      try {
        MPI_Request r;
        self->wire_ = std::make_unique<WireMessage>();
        self->check_posted(MPI_Irecv(self->wire_.get(), sizeof(WireMessage), MPI_BYTE, self->peer_,
                                     self->tag_, self->eng_.p2p_, &r),
                           self->peer_);
        self->track(r, self->peer_, true);
      } catch (const std::exception& e) {
        self->fail(e.what());
      }
    });
  }
  void on_finished() override { release(); }
  void on_request_done(int slot, const MPI_Status& st) override {
    if (slot == 0) {
      on_header(st);
    } else if (outstanding_ == 0) {
      finish_recv();
    }
  }
  void finish_recv() {
    if (!mismatch_.empty()) return fail(mismatch_);
    if (into_.defined() && !into_.device().is_cpu()) into_.copy_from(host_);
    succeed();
  }
  Tensor tensor() const override { return into_.defined() ? into_ : host_; }
  int64_t meta() const override { return header_.meta; }

 private:
  void on_header(const MPI_Status& st) {
    int received = 0;
    MPI_Get_count(&st, MPI_BYTE, &received);
    if (received >= static_cast<int>(sizeof(WireHeader))) header_ = wire_->header;
    if (received < static_cast<int>(sizeof(WireHeader)) || header_.magic != kHeaderMagic || header_.ndim < 0 ||
        header_.ndim > kMaxDims || header_.dtype < 0 || header_.dtype > static_cast<int>(DType::I64)) {
      fail(cat("rank ", eng_.rank_, ": ", what_, ": malformed message header (a different program or "
               "version on the other side?)"));
      return;
    }
    Shape shape(header_.dims, header_.dims + header_.ndim);
    auto dtype = static_cast<DType>(header_.dtype);
    if (into_.defined()) {
      if (into_.shape() != shape || into_.dtype() != dtype) {
        // Still take the payload (into a throw-away buffer) so the next
        // message on this tag is read as a header, then report.
        mismatch_ = cat("rank ", eng_.rank_, ": ", what_, ": expected ", shape_str(into_.shape()), " ",
                        dtype_name(into_.dtype()), " but rank ", peer_, " sent ", shape_str(shape), " ",
                        dtype_name(dtype));
        host_ = Tensor::empty(shape, dtype);
      } else {
        host_ = into_.device().is_cpu() ? into_ : Tensor::empty(shape, dtype);
      }
    } else {
      host_ = Tensor::empty(shape, dtype);
    }
    const int bytes = checked_count(host_.nbytes(), "message");
    if (header_.flags & kPayloadInline) {
      release();
      if (received != static_cast<int>(sizeof(WireHeader)) + bytes) {
        fail(cat("rank ", eng_.rank_, ": ", what_, ": message of ", received, " bytes for a ", shape_str(shape), " ",
                 dtype_name(dtype), " tensor (a different program or version on the other side?)"));
        return;
      }
      if (bytes > 0) std::memcpy(host_.raw(), wire_->payload, static_cast<size_t>(bytes));
      wire_.reset();
      finish_recv();
      return;
    }
    wire_.reset();
    if (bytes == 0) {
      finish_recv();
      return;
    }
    MPI_Request r;
    check_posted(MPI_Irecv(host_.raw(), bytes, MPI_BYTE, peer_, tag_, eng_.p2p_, &r), peer_);
    track(r, peer_, true);
    release();
  }
  void release() {
    if (!holds_channel_) return;
    holds_channel_ = false;
    eng_.release_channel(peer_, tag_);
  }

  bool holds_channel_ = false;
  Tensor into_, host_;
  std::unique_ptr<WireMessage> wire_;  // the first message: header, inline payload
  WireHeader header_;
  int peer_, tag_;
  std::string mismatch_;
};

class MpiGroup final : public CommGroup {
 public:
  MpiGroup(std::vector<int> ranks, int index, int key) : ranks_(std::move(ranks)), index_(index), key_(key) {}
  const std::vector<int>& ranks() const override { return ranks_; }
  int index() const override { return index_; }
  int key() const { return key_; }
  // Sequence number of the next all-reduce (same on all members because
  // they issue them in the same order).
  int next_seq() { return seq_++; }

 private:
  std::vector<int> ranks_;
  int index_, key_, seq_ = 0;
};

// Deterministic all-reduce in two exchanges (reduce-scatter, all-gather):
// member k owns chunk k; every member sends each owner its part; the owner
// adds the n parts in rank order (reduce_in_rank_order) and sends the result
// back to everyone. Each member moves 2(n-1)/n of the data, as a ring does,
// in 2 latency steps, and the order of additions never depends on timing.
class AllReduceOp final : public MpiOp {
 public:
  AllReduceOp(MpiEngine& e, MpiGroup& g, std::vector<Tensor> tensors, ReduceOp op, int tag_base)
      : MpiOp(e, ""), ranks_(g.ranks()), me_(g.index()), op_(op), tag_base_(tag_base), tensors_(std::move(tensors)) {
    size_t total = 0;
    for (auto& t : tensors_) {
      PD_CHECK(t.dtype() == DType::F32, "all-reduce takes f32 tensors, got ", dtype_name(t.dtype()));
      PD_CHECK(t.device().is_cpu(), "the MPI transport all-reduces host tensors only");
      total += static_cast<size_t>(t.numel());
    }
    count_ = total;
    what_ = cat("all-reduce #", tag_base & ((1 << kSeqBits) - 1), " of ", bytes_text(static_cast<double>(total) * 4),
                " in group ", ranks_text(ranks_));
    if (tensors_.size() == 1) {
      buf_ = tensors_[0].f32();
    } else {
      packed_.resize(total);
      size_t off = 0;
      for (auto& t : tensors_) {
        std::memcpy(packed_.data() + off, t.f32(), t.nbytes());
        off += static_cast<size_t>(t.numel());
      }
      buf_ = packed_.data();
    }
    const size_t n = ranks_.size();
    scratch_.resize(n * chunk_len(me_));
  }

  void start() override {
    const int n = static_cast<int>(ranks_.size());
    const size_t mine = chunk_len(me_);
    for (int k = 0; k < n; ++k) {
      if (k == me_) continue;
      if (chunk_len(k) > 0) post_send(buf_ + chunk_begin(k), chunk_len(k), ranks_[k], 0);
      if (mine > 0) post_recv(scratch_.data() + k * mine, mine, ranks_[k], 0);
    }
    if (outstanding_ == 0) reduce_and_gather();
  }

  void on_request_done(int, const MPI_Status&) override {
    if (outstanding_ != 0) return;
    if (phase_ == 0)
      reduce_and_gather();
    else
      finish_op();
  }

 private:
  size_t chunk_begin(int k) const { return count_ * k / ranks_.size(); }
  size_t chunk_len(int k) const { return chunk_begin(k + 1) - chunk_begin(k); }
  int tag(int phase) const { return tag_base_ | (phase << kSeqBits); }

  void post_send(float* p, size_t len, int peer, int phase) {
    MPI_Request r;
    check_posted(MPI_Isend(p, checked_count(len, "all-reduce chunk (floats)"), MPI_FLOAT, peer,
                           tag(phase), eng_.coll_, &r), peer);
    track(r, peer, false);
  }
  void post_recv(float* p, size_t len, int peer, int phase) {
    MPI_Request r;
    check_posted(MPI_Irecv(p, checked_count(len, "all-reduce chunk (floats)"), MPI_FLOAT, peer,
                           tag(phase), eng_.coll_, &r), peer);
    track(r, peer, true);
  }

  void reduce_and_gather() {
    phase_ = 1;
    const int n = static_cast<int>(ranks_.size());
    const size_t mine = chunk_len(me_);
    float* out = buf_ + chunk_begin(me_);
    if (mine > 0) {
      std::vector<const float*> in(n);
      for (int k = 0; k < n; ++k) in[k] = k == me_ ? out : scratch_.data() + k * mine;
      reduce_in_rank_order(in, out, mine, op_);
    }
    for (int k = 0; k < n; ++k) {
      if (k == me_) continue;
      if (mine > 0) post_send(out, mine, ranks_[k], 1);
      if (chunk_len(k) > 0) post_recv(buf_ + chunk_begin(k), chunk_len(k), ranks_[k], 1);
    }
    if (outstanding_ == 0) finish_op();
  }

  void finish_op() {
    if (!packed_.empty()) {
      size_t off = 0;
      for (auto& t : tensors_) {
        std::memcpy(t.f32(), packed_.data() + off, t.nbytes());
        off += static_cast<size_t>(t.numel());
      }
    }
    succeed();
  }

  std::vector<int> ranks_;
  int me_;
  ReduceOp op_;
  int tag_base_;
  std::vector<Tensor> tensors_;
  size_t count_ = 0;
  float* buf_ = nullptr;
  std::vector<float> packed_, scratch_;
  int phase_ = 0;
};

class DoneOp final : public RequestState {
 public:
  bool test() override { return true; }
  void wait(double) override {}
};

}  // namespace

// ---------------------------------------------------------------------------

MpiTransport::MpiTransport(double timeout_s) {
  int initialized = 0;
  MPI_Initialized(&initialized);
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    we_initialized_mpi_ = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_SERIALIZED)
    throw RuntimeFailure(cat("this MPI library provides thread level ", provided,
                             "; pipedream needs MPI_THREAD_SERIALIZED (its communication thread "
                             "calls MPI). Rebuild MPI with thread support."));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  note_rank_for_signals(rank_);
  install_stop_signal_handlers();

  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  MPI_Get_processor_name(name, &len);
  std::vector<char> all(static_cast<size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR,
                MPI_COMM_WORLD);
  for (int r = 0; r < size_; ++r) hosts_.emplace_back(all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);

  engine_ = std::make_unique<MpiEngine>(rank_, timeout_s);
}

MpiTransport::~MpiTransport() {
  const bool failing = std::uncaught_exceptions() > 0 || !engine_->failure().empty();
  if (failing) {
    // Leaving on an error: tell the peers who failed (they print it and stop
    // waiting for us), then skip MPI_Finalize (it would wait for them). The
    // launcher ends the job when this process exits.
    if (!engine_->peers_notified_.exchange(true)) {
      std::string why = engine_->failure().empty() ? cat("rank ", rank_, ": exiting on an error")
                                                   : engine_->failure();
      std::mutex m;
      std::condition_variable cv;
      bool done = false;
      engine_->submit([&] {
        engine_->notify_peers(why, size_, std::chrono::milliseconds(300));
        std::lock_guard lk(m);
        done = true;
        cv.notify_all();
      });
      std::unique_lock lk(m);
      cv.wait_for(lk, std::chrono::seconds(2), [&] { return done; });
      lk.unlock();
      engine_->stop(false);  // runs the notice command if still queued
    }
    engine_->stop(false);
    fflush(stderr);
    return;
  }
  engine_->stop(true);
  engine_->finalize_comms();
  if (we_initialized_mpi_) MPI_Finalize();
}

std::string MpiTransport::host_of(int rank) const {
  PD_CHECK(rank >= 0 && rank < size_, "rank ", rank, " out of range");
  return hosts_[rank];
}

int MpiTransport::max_tag() const { return engine_->tag_ub_; }

namespace {
void check_peer(int peer, int size, int me, const char* what) {
  if (peer < 0 || peer >= size || peer == me)
    throw std::logic_error(cat(what, ": peer rank ", peer, " is not another rank of this world of ", size));
}
template <class Op>
Request launch(MpiEngine& eng, std::shared_ptr<Op> op) {
  eng.submit([op] {
    try {
      op->start();
      op->update_waiting_peer();
    } catch (const std::exception& e) {
      op->fail(e.what());
    }
  });
  return Request(op);
}
}  // namespace

Request MpiTransport::isend(const Tensor& t, int peer, int tag, int64_t meta) {
  check_peer(peer, size_, rank_, "isend");
  PD_CHECK(tag >= 0 && tag <= max_tag(), "tag ", tag, " outside [0, ", max_tag(), "]");
  return launch(*engine_, std::make_shared<SendOp>(*engine_, t, peer, tag, meta));
}

Request MpiTransport::irecv(Tensor into, int peer, int tag) {
  check_peer(peer, size_, rank_, "irecv");
  PD_CHECK(tag >= 0 && tag <= max_tag(), "tag ", tag, " outside [0, ", max_tag(), "]");
  PD_CHECK(into.defined(), "irecv needs an allocated tensor; use irecv_any for unknown shapes");
  return launch(*engine_, std::make_shared<RecvOp>(*engine_, into, peer, tag));
}

Request MpiTransport::irecv_any(int peer, int tag) {
  check_peer(peer, size_, rank_, "irecv_any");
  PD_CHECK(tag >= 0 && tag <= max_tag(), "tag ", tag, " outside [0, ", max_tag(), "]");
  return launch(*engine_, std::make_shared<RecvOp>(*engine_, Tensor{}, peer, tag));
}

std::shared_ptr<CommGroup> MpiTransport::make_group(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end())
    throw std::logic_error(cat("make_group: rank listed twice in ", ranks_text(ranks)));
  auto me = std::find(ranks.begin(), ranks.end(), rank_);
  if (me == ranks.end())
    throw std::logic_error(cat("make_group: rank ", rank_, " is not in ", ranks_text(ranks)));
  for (int r : ranks)
    if (r < 0 || r >= size_) throw std::logic_error(cat("make_group: rank ", r, " out of world of ", size_));
  // Tags of a group's traffic carry a key derived from its rank list and
  // how many groups with that list this rank made before: the same on every
  // member without any communication (so creating a group cannot hang).
  static std::map<std::vector<int>, int> instances;
  static std::map<int, std::vector<int>> keys_in_use;
  int instance = instances[ranks]++;
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) h = (h ^ static_cast<uint64_t>(r)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(instance + 0x9e37)) * 1099511628211ull;
  int tag_bits = 0;
  while (tag_bits < 31 && (1ll << (tag_bits + 1)) - 1 <= max_tag()) ++tag_bits;
  const int key_bits = tag_bits - kSeqBits - 1;
  PD_CHECK(key_bits >= 4, "MPI_TAG_UB ", max_tag(), " is too small for group tags");
  int key = static_cast<int>(h % (1ull << key_bits));
  auto it = keys_in_use.find(key);
  if (it != keys_in_use.end()) {
    int shared = 0;
    for (int r : ranks) shared += std::count(it->second.begin(), it->second.end(), r);
    if (shared >= 2)
      throw std::logic_error(cat("make_group: groups ", ranks_text(ranks), " and ",
                                 ranks_text(it->second), " got the same tag key; reorder group creation"));
  }
  keys_in_use[key] = ranks;
  return std::make_shared<MpiGroup>(ranks, static_cast<int>(me - ranks.begin()), key);
}

Request MpiTransport::iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) {
  auto* group = dynamic_cast<MpiGroup*>(&g);
  PD_CHECK(group != nullptr, "iall_reduce: group was not made by this transport");
  if (group->size() == 1) return Request(std::make_shared<DoneOp>());
  const int seq = group->next_seq() & ((1 << kSeqBits) - 1);
  const int tag_base = (group->key() << (kSeqBits + 1)) | seq;
  return launch(*engine_, std::make_shared<AllReduceOp>(*engine_, *group, std::move(tensors), op, tag_base));
}

void MpiTransport::set_timeout(double seconds) {
  if (!(seconds > 0)) throw UserError(cat("--timeout must be positive seconds, got ", seconds));
  engine_->timeout_s_ = seconds;
}

double MpiTransport::timeout() const { return engine_->timeout_s_.load(); }

void MpiTransport::abort(const std::string& reason, int exit_code) {
  // Messages made here already start with "rank N: "; do not say it twice.
  const std::string prefix = cat("rank ", rank_, ": ");
  std::string why = reason.rfind(prefix, 0) == 0 ? reason : prefix + reason;
  fprintf(stderr, "pipedream: error: %s\n", why.c_str());
  fflush(stderr);
  const bool notify = !engine_->peers_notified_.exchange(true);
  engine_->submit([this, why, notify, exit_code] {
    if (notify) engine_->notify_peers(why, size_, std::chrono::milliseconds(300));
    MPI_Abort(MPI_COMM_WORLD, exit_code);
  });
  // The comm thread ends the process; if MPI_Abort itself fails to, exit.
  std::this_thread::sleep_for(std::chrono::seconds(10));
  _exit(exit_code);
}

void MpiTransport::run_on_comm_thread(const std::function<void()>& fn) {
  std::mutex m;
  std::condition_variable cv;
  bool done = false;
  std::exception_ptr err;
  engine_->submit([&] {
    try {
      fn();
    } catch (...) {
      err = std::current_exception();
    }
    std::lock_guard lk(m);
    done = true;
    cv.notify_all();
  });
  std::unique_lock lk(m);
  cv.wait(lk, [&] { return done; });
  if (err) std::rethrow_exception(err);
}

}  // namespace pd
