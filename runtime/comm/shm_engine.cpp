// The same-host path: the progress thread, ring protocol, matching and the
// all-reduce. See shm_engine.h for the design.

// C API only: Open MPI's mpi.h would otherwise drag in the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "runtime/comm/shm_engine.h"

#include <pthread.h>
#include <unistd.h>  // gettid
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/text.h"
#include "runtime/comm/core_handoff.h"
#include "runtime/comm/mpi_engine.h"  // ranks_text

namespace pd {
namespace {

using Clock = std::chrono::steady_clock;

constexpr uint32_t kMagic = 0x4d485350;  // "PSHM"
constexpr int kMaxDims = 8;
enum class MsgKind : int32_t { Tensor = 0, Collective = 1 };

// Every message: this header, then the payload padded to 64 bytes, so
// headers start on a cache line.
struct alignas(64) Header {
  uint32_t magic = kMagic;
  MsgKind kind = MsgKind::Tensor;
  int64_t tag = 0;
  int32_t dtype = 0;
  int32_t ndim = 0;
  int64_t dims[kMaxDims] = {};
  int64_t meta = 0;
  uint64_t nbytes = 0;
};
constexpr uint64_t kHeaderBytes = sizeof(Header);
static_assert(kHeaderBytes == 128);

uint64_t padded(uint64_t n) { return (n + 63) / 64 * 64; }

// Copies are published in chunks of at most this, so the receiver copies
// out while the sender still copies in.
constexpr uint64_t kChunkMax = 256u << 10;

void ring_write(const ShmRing& r, uint64_t pos, const char* src, uint64_t n) {
  const uint64_t at = pos % r.bytes, first = std::min(n, r.bytes - at);
  std::memcpy(r.data + at, src, first);
  if (n > first) std::memcpy(r.data, src + first, n - first);
}

void ring_read(const ShmRing& r, uint64_t pos, char* dst, uint64_t n) {
  const uint64_t at = pos % r.bytes, first = std::min(n, r.bytes - at);
  std::memcpy(dst, r.data + at, first);
  if (n > first) std::memcpy(dst + first, r.data, n - first);
}

// reader_wants: bit 0 for the progress thread, kOwnerWaiting per thread
// asleep on reader_seq.
constexpr uint32_t kProgressWants = 1, kOwnerWaiting = 2;

// How an arriving collective chunk combines with what is in its target.
enum class Combine : uint8_t { Copy, AccPlusIn, InPlusAcc };

void add_floats(float* acc, const float* in, uint64_t count, Combine c) {
  if (c == Combine::AccPlusIn) {
    for (uint64_t e = 0; e < count; ++e) acc[e] = acc[e] + in[e];
  } else {
    for (uint64_t e = 0; e < count; ++e) acc[e] = in[e] + acc[e];
  }
}

void ring_combine(const ShmRing& r, uint64_t pos, char* dst, uint64_t n, Combine c) {
  if (c == Combine::Copy) return ring_read(r, pos, dst, n);
  const uint64_t at = pos % r.bytes, first = std::min(n, r.bytes - at);
  add_floats(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(r.data + at), first / 4, c);
  if (n > first)
    add_floats(reinterpret_cast<float*>(dst + first), reinterpret_cast<const float*>(r.data), (n - first) / 4, c);
}

}  // namespace

class ShmEngineImpl;

// A request: completed by the progress thread, waited for by the caller.
class ShmOp final : public RequestState {
 public:
  ShmOp(ShmEngineImpl& e, std::string what, int peer) : eng_(e), what_(std::move(what)), waiting_peer_(peer) {}
  bool test() override;
  void wait(double timeout_s) override;
  Tensor tensor() const override { return result_; }
  int64_t meta() const override { return meta_; }

  ShmEngineImpl& eng_;
  std::string what_;
  std::atomic<int> waiting_peer_;
  std::atomic<bool> done_{false};
  std::string error_;  // written before done_
  Tensor result_;
  int64_t meta_ = 0;
  // A tensor receive is taken out of the ring when its owner first tests
  // or waits on it (see ShmEngineImpl::recv); this hands it over. Caller's
  // thread only.
  std::function<void()> arm_;
  // A send: blocking on it first takes every receive (arm_all).
  bool is_send_ = false;
  // A tensor receive: the local index of its peer, whose ring the caller
  // polls while it waits. -1 otherwise.
  int poll_src_ = -1;
  // The caller sleeps on that ring's reader_seq: completing the receive
  // elsewhere (the progress thread) must wake it.
  std::atomic<bool> sleeps_on_ring_{false};
  // Throws `failure` (the job's, read without done_mu_ held) if there is
  // one, or a timeout naming the silent peer once `deadline` has passed.
  void throw_if_failed_or_late(const std::string& failure, Clock::time_point deadline, double timeout_s);
  // Waits for a receive by taking its message on this thread.
  void wait_on_ring(Clock::time_point deadline, double timeout_s);
  void ring_leave(const ShmRing& ring) {
    ring.reader_wants->fetch_sub(kOwnerWaiting, std::memory_order_seq_cst);
    sleeps_on_ring_.store(false, std::memory_order_relaxed);
  }
  void arm() {
    if (!arm_) return;
    auto f = std::move(arm_);
    arm_ = nullptr;
    f();
  }
};

namespace {

struct OutMsg {
  Header h;
  const char* data = nullptr;
  Tensor keep;  // owns data for tensor messages
  uint64_t written = 0;  // of kHeaderBytes + padded(h.nbytes)
  std::function<void(const std::string&)> done;
};

// A posted receive.
struct InPost {
  MsgKind kind = MsgKind::Tensor;
  int64_t tag = 0;
  int peer = 0;
  std::string what;
  // Tensor receives: the caller's tensor (undefined: any shape).
  Tensor into;
  // Collective receives: a fixed target and how to combine into it.
  char* raw = nullptr;
  uint64_t raw_bytes = 0;
  Combine combine = Combine::Copy;
  // Set when matched.
  Header h;
  Tensor host;  // where a tensor message lands
  std::string error;
  std::function<void(InPost&)> done;
};

// A message that arrived before its receive was posted.
struct Unexpected {
  Header h;
  Tensor buf;
  bool complete = false;
  std::shared_ptr<InPost> claimer;
};

using MatchKey = std::pair<int32_t, int64_t>;  // kind, tag

struct Inbound {
  ShmRing ring{};
  uint64_t tail = 0;  // local copy of ring.tail
  bool wants = false;  // what ring.reader_wants says
  bool in_msg = false;
  Header h;
  uint64_t consumed = 0;
  char* dst = nullptr;
  Combine combine = Combine::Copy;
  std::shared_ptr<InPost> post;
  std::shared_ptr<Unexpected> unexpected;
  std::map<MatchKey, std::deque<std::shared_ptr<InPost>>> posted;
  int posted_count = 0;
  std::map<MatchKey, std::deque<std::shared_ptr<Unexpected>>> early;
  // Tensor receives posted but not yet tested or waited on by their owner:
  // their messages stay in the ring (see ShmEngineImpl::recv).
  std::map<MatchKey, std::deque<std::shared_ptr<InPost>>> lazy;
};

struct Outbound {
  ShmRing ring{};
  uint64_t head = 0;  // local copy of ring.head
  bool wants = false;  // what ring.writer_wants says
  std::deque<std::shared_ptr<OutMsg>> queue;
  // Bytes the peer has freed for writing.
  uint64_t room() const { return ring.bytes - (head - ring.tail->load(std::memory_order_acquire)); }
};

MatchKey key_of(const InPost& p) { return {static_cast<int32_t>(p.kind), p.tag}; }

// Publishing interest, then looking at the ring (or publishing bytes, then
// looking at the interest) with a full fence between, on both sides: one
// of them sees the other, so no wake-up is lost.

void publish_wants(std::atomic<uint32_t>* flag, bool& cached, bool wants) {
  if (wants == cached) return;
  cached = wants;
  if (wants)
    flag->fetch_or(kProgressWants, std::memory_order_relaxed);
  else
    flag->fetch_and(~kProgressWants, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

uint32_t peer_wants(const std::atomic<uint32_t>* flag) {
  std::atomic_thread_fence(std::memory_order_seq_cst);
  return flag->load(std::memory_order_relaxed);
}

void bump_and_wake(std::atomic<uint32_t>* seq) {
  seq->fetch_add(1, std::memory_order_seq_cst);
  ShmSegment::wake_all(seq);
}

bool valid_tensor_header(const Header& h) {
  if (h.ndim < 0 || h.ndim > kMaxDims || h.dtype < 0 || h.dtype > static_cast<int>(DType::I64)) return false;
  int64_t numel = 1;
  for (int i = 0; i < h.ndim; ++i) {
    if (h.dims[i] < 0) return false;
    numel *= h.dims[i];
  }
  return static_cast<uint64_t>(numel) * dtype_size(static_cast<DType>(h.dtype)) == h.nbytes;
}

Shape shape_of(const Header& h) { return Shape(h.dims, h.dims + h.ndim); }

}  // namespace

class ShmEngineImpl {
 public:
  ShmEngineImpl(ShmSegment seg, int world_rank, std::vector<int> local_of, double timeout_s,
                std::function<std::string()> failure, bool core_handoff)
      : seg_(std::move(seg)), rank_(world_rank), local_of_(std::move(local_of)), timeout_s_(timeout_s),
        failure_probe_(std::move(failure)), handoff_(core_handoff) {
    me_ = local_of_[rank_];
    // The rank's actions run on the thread that makes its transport.
    seg_.doorbell(me_).worker_tid.store(static_cast<int32_t>(gettid()), std::memory_order_relaxed);
    const int n = seg_.ranks();
    in_.resize(n);
    out_.resize(n);
    out_mu_ = std::make_unique<std::recursive_mutex[]>(static_cast<size_t>(n));
    in_mu_ = std::make_unique<std::recursive_mutex[]>(static_cast<size_t>(n));
    world_of_.assign(n, -1);
    for (size_t r = 0; r < local_of_.size(); ++r)
      if (local_of_[r] >= 0) world_of_[local_of_[r]] = static_cast<int>(r);
    for (int l = 0; l < n; ++l) {
      if (l == me_) continue;
      in_[l].ring = seg_.ring(l, me_);
      out_[l].ring = seg_.ring(me_, l);
    }
    thread_ = std::thread([this] {
      pthread_setname_np(pthread_self(), "pd-shm");
      loop();
    });
  }
  ~ShmEngineImpl() { stop(false); }

  void stop(bool drain) {
    if (!thread_.joinable()) return;
    {
      std::lock_guard lk(queue_mu_);
      stopping_ = true;
      drain_ = drain;
    }
    seg_.ring_doorbell(me_);
    thread_.join();
  }

  void submit(std::function<void()> fn) {
    {
      std::lock_guard lk(queue_mu_);
      queue_.push_back(std::move(fn));
    }
    seg_.ring_doorbell(me_);
  }

  // --- operations (caller's thread) ---------------------------------------
  Request send(const Tensor& t, int peer, int tag, int64_t meta) {
    auto op = std::make_shared<ShmOp>(*this, cat("send tag ", tag, " ", shape_str(t.shape()), " ",
                                                 dtype_name(t.dtype()), " to rank ", peer), peer);
    PD_CHECK(t.ndim() <= kMaxDims, "tensors of more than ", kMaxDims, " dims cannot be sent");
    auto m = std::make_shared<OutMsg>();
    m->keep = t.device().is_cpu() ? t : t.to(Device::cpu());  // host staging
    m->data = static_cast<const char*>(m->keep.raw());
    m->h.kind = MsgKind::Tensor;
    m->h.tag = tag;
    m->h.dtype = static_cast<int32_t>(t.dtype());
    m->h.ndim = t.ndim();
    for (int i = 0; i < t.ndim(); ++i) m->h.dims[i] = t.shape()[i];
    m->h.meta = meta;
    m->h.nbytes = m->keep.nbytes();
    op->is_send_ = true;
    const int dst = local_of_[peer];
    // Written on this thread when nothing to the peer is queued and the
    // ring has room: the caller's tensor is free the moment send returns
    // (its memory does not depend on when the progress thread next runs),
    // and the message is one thread wake-up closer to its receiver.
    if (write_now(dst, *m)) {
      complete(*op, "");
      return Request(op);
    }
    m->done = [op](const std::string& err) { complete(*op, err.empty() ? err : cat(op->what_, ": ", err)); };
    post_send(dst, m);
    seg_.ring_doorbell(me_);
    return Request(op);
  }

  Request recv(Tensor into, int peer, int tag) {
    auto op = std::make_shared<ShmOp>(*this, cat("receive tag ", tag, " from rank ", peer), peer);
    auto p = std::make_shared<InPost>();
    p->kind = MsgKind::Tensor;
    p->tag = tag;
    p->peer = peer;
    p->what = op->what_;
    p->into = std::move(into);
    p->done = [op](InPost& q) {
      if (q.error.empty()) {
        if (q.into.defined() && !q.into.device().is_cpu()) q.into.copy_from(q.host);
        op->result_ = q.into.defined() ? q.into : q.host;
        op->meta_ = q.h.meta;
      }
      complete(*op, q.error);
    };
    // Not handed to the progress thread yet: the message stays in the ring
    // until the owner first tests or waits, and is then copied out, on the
    // owner's thread when it is there whole. So what a worker holds of its
    // received tensors follows its own order of actions, not when its peers'
    // messages happened to arrive (a pipeline posts its receives many
    // actions ahead), and a message already there costs no thread wake-up.
    const int src = local_of_[peer];
    op->poll_src_ = src;
    {
      std::lock_guard lk(in_mu_[src]);
      in_[src].lazy[key_of(*p)].push_back(p);
    }
    std::weak_ptr<InPost> weak = p;
    op->arm_ = [this, src, weak] {
      if (auto q = weak.lock()) arm(src, q);
    };
    return Request(op);
  }

  // Posts `p` and the receives of its (peer, tag) posted before it, then
  // takes what is already in the ring on this thread.
  void arm(int src, const std::shared_ptr<InPost>& p) {
    std::lock_guard lk(in_mu_[src]);
    Inbound& in = in_[src];
    auto it = in.lazy.find(key_of(*p));
    if (it == in.lazy.end()) return;  // posted with a later one, or failed
    auto& q = it->second;
    const auto pos = std::find(q.begin(), q.end(), p);
    if (pos == q.end()) return;
    std::vector<std::shared_ptr<InPost>> now(q.begin(), pos + 1);
    q.erase(q.begin(), pos + 1);
    if (q.empty()) in.lazy.erase(it);
    for (auto& r : now) post_recv(src, r);
    service_inbound(src, /*tensors_only=*/true);
    // Bytes not there yet ring the progress thread when they come, since
    // the receive is posted.
    hand_rest_to_progress(src);
  }

  // Before blocking on a send: every receive is posted, as MPI's would be,
  // so a peer whose send waits for one of them moves. (An all-reduce needs
  // none of this: its receives from a peer make the messages ahead of them
  // from that peer be buffered, and a pipeline waits on its sends only at
  // its end.)
  void arm_all() {
    for (int l = 0; l < seg_.ranks(); ++l) {
      if (l == me_) continue;
      std::lock_guard lk(in_mu_[l]);
      Inbound& in = in_[l];
      if (in.lazy.empty()) continue;
      for (auto& [key, q] : in.lazy)
        for (auto& r : q) post_recv(l, r);
      in.lazy.clear();
    }
    seg_.ring_doorbell(me_);
  }

  Request all_reduce(const std::vector<int>& ranks, int my_index, int64_t tag, std::vector<Tensor> tensors,
                     ReduceOp op);

  // --- progress thread (post_send also on the caller's) ---------------------
  void post_send(int dst, const std::shared_ptr<OutMsg>& m) {
    std::lock_guard lk(out_mu_[dst]);
    out_[dst].queue.push_back(m);
    publish_wants(out_[dst].ring.writer_wants, out_[dst].wants, true);
  }

  // The whole message into the ring at once, or false (something to the
  // peer is queued ahead of it, or the ring lacks room).
  bool write_now(int dst, const OutMsg& m) {
    std::lock_guard lk(out_mu_[dst]);
    Outbound& out = out_[dst];
    if (!out.queue.empty()) return false;
    const uint64_t total = kHeaderBytes + padded(m.h.nbytes);
    if (out.room() < total) return false;
    ring_write(out.ring, out.head, reinterpret_cast<const char*>(&m.h), kHeaderBytes);
    ring_write(out.ring, out.head + kHeaderBytes, m.data, m.h.nbytes);
    out.head += total;
    out.ring.head->store(out.head, std::memory_order_release);
    notify_reader(dst, out.ring);
    return true;
  }

  void post_recv(int src, const std::shared_ptr<InPost>& p) {
    std::lock_guard lk(in_mu_[src]);
    Inbound& in = in_[src];
    const MatchKey key = key_of(*p);
    auto it = in.early.find(key);
    if (it != in.early.end()) {
      auto u = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) in.early.erase(it);
      if (u->complete)
        deliver_early(*p, *u);
      else
        u->claimer = p;
      return;
    }
    in.posted[key].push_back(p);
    ++in.posted_count;
    publish_wants(in.ring.reader_wants, in.wants, true);
  }

  // A caller waiting on a receive from `src` takes what has arrived.
  void poll(int src) { service_inbound(src, /*tensors_only=*/true); }

  // Called on a thread about to sleep in a wait (core_handoff.h).
  void offer_core() {
    if (!handoff_.enabled()) return;
    std::vector<int> tids;
    for (int l = 0; l < seg_.ranks(); ++l)
      if (l != me_) tids.push_back(seg_.doorbell(l).worker_tid.load(std::memory_order_relaxed));
    handoff_.offer_my_core(tids);
  }
  const ShmRing& inbound_ring(int src) const { return in_[src].ring; }
  // Bytes from `src` a caller's taking left (a collective's message ahead
  // of its own, a message still streaming in) go to the progress thread.
  void hand_rest_to_progress(int src) {
    bool left;
    {
      std::lock_guard lk(in_mu_[src]);
      left = in_[src].ring.head->load(std::memory_order_acquire) != in_[src].tail;
    }
    if (left) seg_.ring_doorbell(me_);
  }

  // A thread of dst asleep on a receive from us takes the bytes itself;
  // otherwise dst's progress thread, if it has a receive they may serve.
  void notify_reader(int dst, const ShmRing& r) {
    const uint32_t w = peer_wants(r.reader_wants);
    if (w >= kOwnerWaiting)
      bump_and_wake(r.reader_seq);
    else if (w & kProgressWants)
      seg_.ring_doorbell(dst);
  }

  int global_to_local(int world_rank) const { return local_of_[world_rank]; }
  int world_rank() const { return rank_; }
  double timeout() const { return timeout_s_.load(); }
  void set_timeout(double s) { timeout_s_ = s; }
  uint64_t ring_bytes() const { return seg_.ring_bytes(); }

  std::string failure() {
    {
      std::lock_guard lk(done_mu_);
      if (!failure_.empty()) return failure_;
    }
    return failure_probe_ ? failure_probe_() : std::string();
  }

  static void complete(ShmOp& op, const std::string& err) {
    auto& e = op.eng_;
    {
      std::lock_guard lk(e.done_mu_);
      op.error_ = err;
      op.done_.store(true, std::memory_order_seq_cst);
    }
    e.done_cv_.notify_all();
    if (op.poll_src_ >= 0 && op.sleeps_on_ring_.load(std::memory_order_seq_cst))
      bump_and_wake(e.in_[op.poll_src_].ring.reader_seq);
  }

  std::mutex done_mu_;
  std::condition_variable done_cv_;

 private:
  // Where a matched message's payload goes: sets p.host / p.error and
  // returns the destination and how to combine.
  char* bind(InPost& p, const Header& h, Combine& combine) {
    p.h = h;
    combine = Combine::Copy;
    if (p.kind == MsgKind::Collective) {
      if (h.nbytes == p.raw_bytes) {
        combine = p.combine;
        return p.raw;
      }
      p.error = cat("rank ", rank_, ": ", p.what, ": ", h.nbytes, " bytes arrived for a ", p.raw_bytes,
                    "-byte chunk (members issued different all-reduces)");
      p.host = Tensor::empty({static_cast<int64_t>(h.nbytes / 4)}, DType::F32);
      return static_cast<char*>(p.host.raw());
    }
    const Shape shape = shape_of(h);
    const auto dtype = static_cast<DType>(h.dtype);
    if (p.into.defined() && (p.into.shape() != shape || p.into.dtype() != dtype)) {
      p.error = cat("rank ", rank_, ": ", p.what, ": expected ", shape_str(p.into.shape()), " ",
                    dtype_name(p.into.dtype()), " but rank ", p.peer, " sent ", shape_str(shape), " ",
                    dtype_name(dtype));
      p.host = Tensor::empty(shape, dtype);
    } else {
      p.host = p.into.defined() && p.into.device().is_cpu() ? p.into : Tensor::empty(shape, dtype);
    }
    return static_cast<char*>(p.host.raw());
  }

  void deliver_early(InPost& p, Unexpected& u) {
    Combine combine;
    if (p.kind == MsgKind::Tensor && !p.into.defined()) {
      p.h = u.h;
      p.host = u.buf;  // irecv_any: hand over the buffer itself
    } else {
      char* dst = bind(p, u.h, combine);
      const char* src = static_cast<const char*>(u.buf.raw());
      if (combine == Combine::Copy)
        std::memcpy(dst, src, u.h.nbytes);
      else
        add_floats(reinterpret_cast<float*>(dst), reinterpret_cast<const float*>(src), u.h.nbytes / 4, combine);
    }
    p.done(p);
  }

  Tensor early_buffer(const Header& h) {
    if (h.kind == MsgKind::Tensor) return Tensor::empty(shape_of(h), static_cast<DType>(h.dtype));
    return Tensor::empty({static_cast<int64_t>(h.nbytes / 4)}, DType::F32);
  }

  // Starts consuming the message whose header is at the ring's tail, if
  // a receive wants it or one from this peer waits behind it.
  bool take_header(int src, Inbound& in, bool tensors_only) {
    Header h;
    ring_read(in.ring, in.tail, reinterpret_cast<char*>(&h), kHeaderBytes);
    if (h.magic != kMagic || (h.kind == MsgKind::Tensor && !valid_tensor_header(h)) ||
        (h.kind == MsgKind::Collective && h.nbytes % 4 != 0))
      throw RuntimeFailure(cat("rank ", rank_, ": malformed shared-memory message from rank ", world_of_[src],
                               " (a different program or version on the other side?)"));
    if (tensors_only && h.kind != MsgKind::Tensor) return false;
    const MatchKey key{static_cast<int32_t>(h.kind), h.tag};
    auto it = in.posted.find(key);
    if (it != in.posted.end()) {
      in.post = it->second.front();
      it->second.pop_front();
      if (it->second.empty()) in.posted.erase(it);
      --in.posted_count;
      in.dst = bind(*in.post, h, in.combine);
    } else if (in.posted_count > 0) {
      in.unexpected = std::make_shared<Unexpected>();
      in.unexpected->h = h;
      in.unexpected->buf = early_buffer(h);
      in.early[key].push_back(in.unexpected);
      in.dst = static_cast<char*>(in.unexpected->buf.raw());
      in.combine = Combine::Copy;
    } else {
      return false;  // nobody waits for anything from this peer yet
    }
    in.h = h;
    in.in_msg = true;
    in.consumed = 0;
    in.tail += kHeaderBytes;
    return true;
  }

  void finish_inbound(Inbound& in) {
    in.in_msg = false;
    if (in.post) {
      auto p = std::move(in.post);
      p->done(*p);
    } else {
      auto u = std::move(in.unexpected);
      u->complete = true;
      if (u->claimer) deliver_early(*u->claimer, *u);
    }
  }

  // `tensors_only` on a caller's thread: a collective's message, and what
  // its completion would start, stay with the progress thread.
  int service_inbound(int src, bool tensors_only = false) {
    std::lock_guard lk(in_mu_[src]);
    Inbound& in = in_[src];
    int progress = 0;
    for (;;) {
      const uint64_t avail = in.ring.head->load(std::memory_order_acquire) - in.tail;
      if (tensors_only && in.in_msg && in.h.kind != MsgKind::Tensor) break;
      if (!in.in_msg) {
        if (avail < kHeaderBytes || !take_header(src, in, tensors_only)) break;
      } else if (in.consumed < in.h.nbytes) {
        uint64_t n = std::min({avail, in.h.nbytes - in.consumed, kChunkMax});
        if (in.combine != Combine::Copy) n &= ~uint64_t{3};
        if (n == 0) break;
        ring_combine(in.ring, in.tail, in.dst + in.consumed, n, in.combine);
        in.consumed += n;
        in.tail += n;
      } else {
        const uint64_t pad = padded(in.h.nbytes) - in.h.nbytes;
        if (avail < pad) break;
        in.tail += pad;
        finish_inbound(in);
      }
      in.ring.tail->store(in.tail, std::memory_order_release);
      if (peer_wants(in.ring.writer_wants)) seg_.ring_doorbell(src);
      ++progress;
    }
    publish_wants(in.ring.reader_wants, in.wants, in.posted_count > 0 || in.in_msg);
    return progress;
  }

  int service_outbound(int dst) {
    std::lock_guard lk(out_mu_[dst]);
    Outbound& out = out_[dst];
    int progress = 0;
    while (!out.queue.empty()) {
      OutMsg& m = *out.queue.front();
      const uint64_t space = out.room();
      const uint64_t total = kHeaderBytes + padded(m.h.nbytes);
      if (m.written == 0) {
        if (space < kHeaderBytes) break;
        ring_write(out.ring, out.head, reinterpret_cast<const char*>(&m.h), kHeaderBytes);
        m.written = kHeaderBytes;
        out.head += kHeaderBytes;
      } else if (m.written - kHeaderBytes < m.h.nbytes) {
        const uint64_t sent = m.written - kHeaderBytes, left = m.h.nbytes - sent;
        // Wait for room for a decent chunk rather than trickling bytes; a
        // decent chunk is at most a whole one (with rings over 8 chunks,
        // waiting for an eighth of the ring would wait forever).
        const uint64_t n = std::min({space, left, kChunkMax});
        if (n < std::min({left, out.ring.bytes / 8, kChunkMax})) break;
        ring_write(out.ring, out.head, m.data + sent, n);
        m.written += n;
        out.head += n;
      } else {
        const uint64_t pad = total - m.written;
        if (space < pad) break;
        out.head += pad;
        m.written = total;
      }
      out.ring.head->store(out.head, std::memory_order_release);
      notify_reader(dst, out.ring);
      ++progress;
      if (m.written == total) {
        auto done = std::move(m.done);
        out.queue.pop_front();
        done("");
      }
    }
    publish_wants(out.ring.writer_wants, out.wants, !out.queue.empty());
    return progress;
  }

  int pass() {
    int progress = 0;
    for (int l = 0; l < seg_.ranks(); ++l) {
      if (l == me_) continue;
      progress += service_outbound(l);
      progress += service_inbound(l);
    }
    return progress;
  }

  bool has_queued_sends() {
    for (int l = 0; l < seg_.ranks(); ++l) {
      std::lock_guard lk(out_mu_[l]);
      if (l != me_ && !out_[l].queue.empty()) return true;
    }
    return false;
  }

  void fail_everything(const std::string& why_recv, const std::string& why_send) {
    for (int l = 0; l < seg_.ranks(); ++l) {
      std::lock_guard lk(in_mu_[l]);
      Inbound& in = in_[l];
      for (auto& [key, q] : in.lazy)
        for (auto& p : q) {
          p->error = cat(p->what, why_recv);
          p->done(*p);
        }
      in.lazy.clear();
      for (auto& [key, q] : in.posted)
        for (auto& p : q) {
          p->error = cat(p->what, why_recv);
          p->done(*p);
        }
      in.posted.clear();
      for (auto& [key, q] : in.early)
        for (auto& u : q)
          if (u->claimer) {
            u->claimer->error = cat(u->claimer->what, why_recv);
            u->claimer->done(*u->claimer);
          }
      in.early.clear();
      if (in.in_msg && in.post) {
        in.post->error = cat(in.post->what, why_recv);
        in.post->done(*in.post);
      } else if (in.in_msg && in.unexpected && in.unexpected->claimer) {
        in.unexpected->claimer->error = cat(in.unexpected->claimer->what, why_recv);
        in.unexpected->claimer->done(*in.unexpected->claimer);
      }
    }
    for (int l = 0; l < seg_.ranks(); ++l) {
      std::lock_guard lk(out_mu_[l]);
      for (auto& m : out_[l].queue) m->done(why_send);
    }
  }

  void loop() {
    last_progress_ = Clock::now();
    for (;;) {
      std::deque<std::function<void()>> cmds;
      bool stopping, drain;
      {
        std::lock_guard lk(queue_mu_);
        cmds.swap(queue_);
        stopping = stopping_;
        drain = drain_;
      }
      try {
        if (!step(cmds, stopping, drain)) return;
      } catch (const std::exception& e) {
        {
          std::lock_guard lk(done_mu_);
          if (failure_.empty()) failure_ = e.what();
        }
        done_cv_.notify_all();
        fail_everything(cat(": ", e.what()), e.what());
        return;
      }
    }
  }

  // One round of the loop; false when the thread should end.
  bool step(const std::deque<std::function<void()>>& cmds, bool stopping, bool drain) {
    for (auto& c : cmds) c();
    const int progress = pass();
    const auto now = Clock::now();
    if (progress > 0 || !cmds.empty()) last_progress_ = now;
    if (stopping && cmds.empty()) {
      const bool timed_out = now - last_progress_ > std::chrono::duration<double>(timeout_s_.load());
      if (!drain || !has_queued_sends() || timed_out) {
        fail_everything(": cancelled at shutdown", "not delivered at shutdown");
        return false;
      }
    }
    if (progress > 0 || !cmds.empty()) return true;
    // Nothing moved. Right after traffic, spin (yielding the core) for a
    // moment: the next chunk, or the reply to what just went out, is
    // usually microseconds away and a futex wake-up costs more. Then sleep
    // until a peer or a local submit rings the doorbell.
    if (now - last_progress_ < std::chrono::microseconds(50)) {
      sched_yield();
      return true;
    }
    ShmDoorbell& bell = seg_.doorbell(me_);
    bell.sleeping.store(1, std::memory_order_seq_cst);
    const uint32_t seen = bell.seq.load(std::memory_order_seq_cst);
    bool idle;
    {
      std::lock_guard lk(queue_mu_);
      idle = queue_.empty() && stopping_ == stopping;
    }
    if (idle && pass() == 0) seg_.wait_doorbell(me_, seen, 100000);
    bell.sleeping.store(0, std::memory_order_relaxed);
    return true;
  }

  ShmSegment seg_;
  int rank_, me_ = 0;
  std::vector<int> local_of_, world_of_;
  std::atomic<double> timeout_s_;
  std::function<std::string()> failure_probe_;
  std::vector<Inbound> in_;
  std::vector<Outbound> out_;
  // out_[l] is shared by the progress thread and callers writing straight
  // into the ring (write_now). Recursive: a collective's completion, run
  // under the lock, posts its next sends, possibly to the same peer.
  std::unique_ptr<std::recursive_mutex[]> out_mu_;
  // Likewise in_[l], taken by callers (arm) and the progress thread.
  std::unique_ptr<std::recursive_mutex[]> in_mu_;
  std::thread thread_;
  std::mutex queue_mu_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false, drain_ = true;
  std::string failure_;  // the thread died on this; guarded by done_mu_
  Clock::time_point last_progress_;
  CoreHandoff handoff_;

  friend class ShmAllReduce;
};

// --- ShmOp ------------------------------------------------------------------

bool ShmOp::test() {
  arm();
  if (done_.load(std::memory_order_acquire)) {
    std::lock_guard lk(eng_.done_mu_);
    if (!error_.empty()) throw RuntimeFailure(error_);
    return true;
  }
  const std::string f = eng_.failure();
  if (!f.empty()) throw RuntimeFailure(f);
  return false;
}

void ShmOp::throw_if_failed_or_late(const std::string& failure, Clock::time_point deadline, double timeout_s) {
  if (!failure.empty()) throw RuntimeFailure(failure);
  if (Clock::now() < deadline) return;
  char secs[32];
  snprintf(secs, sizeof secs, "%g", timeout_s);
  throw RuntimeFailure(cat("rank ", eng_.world_rank(), ": timed out after ", secs, " s waiting for rank ",
                           waiting_peer_.load(), " (", what_,
                           "); that rank is silent: dead, hung or behind. Raise --timeout if "
                           "it is only slow."));
}

// The sender wakes this thread itself (reader_wants counts it), and the
// message is copied here: one wake-up on the way from the sender's last
// write to this thread running, not two (the progress thread's, then
// this one's), each of which waits for a time slice when the cores are
// busy. A receive the progress thread completes instead (one behind a
// collective's message) wakes it through complete().
void ShmOp::wait_on_ring(Clock::time_point deadline, double timeout_s) {
  const ShmRing& ring = eng_.inbound_ring(poll_src_);
  sleeps_on_ring_.store(true, std::memory_order_seq_cst);
  ring.reader_wants->fetch_add(kOwnerWaiting, std::memory_order_seq_cst);
  struct Leave {
    ShmOp& op;
    const ShmRing& ring;
    ~Leave() {
      op.ring_leave(ring);
    }
  } leave{*this, ring};
  for (;;) {
    const uint32_t seen = ring.reader_seq->load(std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // our count is out before we look at the ring
    eng_.poll(poll_src_);
    if (done_.load(std::memory_order_seq_cst)) return;
    eng_.hand_rest_to_progress(poll_src_);
    const std::string f = eng_.failure();
    if (done_.load(std::memory_order_seq_cst)) return;  // completed meanwhile: it wins
    throw_if_failed_or_late(f, deadline, timeout_s);
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now()).count();
    ShmSegment::wait_word(ring.reader_seq, seen, std::clamp<int64_t>(left, 1, 100000));
  }
}

void ShmOp::wait(double timeout_s) {
  arm();
  if (timeout_s < 0) timeout_s = eng_.timeout();
  const auto start = Clock::now();
  const auto deadline =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s));
  // A reply microseconds away should not pay for a sleep and wake-up, nor
  // wait for the progress thread: a receive takes its message itself.
  const auto spin_until = start + std::chrono::microseconds(30);
  while (!done_.load(std::memory_order_acquire) && Clock::now() < spin_until) {
    if (poll_src_ >= 0) eng_.poll(poll_src_);
    if (!done_.load(std::memory_order_acquire)) sched_yield();
  }
  if (!done_.load(std::memory_order_acquire)) {
    if (is_send_) eng_.arm_all();
    note_blocked_on(cat("waiting for rank ", waiting_peer_.load(), " (", what_, ")").c_str());
    struct Leave {
      ~Leave() { note_blocked_on(nullptr); }
    } leave;
    eng_.offer_core();
    if (poll_src_ >= 0) {
      wait_on_ring(deadline, timeout_s);
    } else {
      std::unique_lock lk(eng_.done_mu_);
      while (!done_.load(std::memory_order_acquire)) {
        lk.unlock();
        const std::string f = eng_.failure();
        lk.lock();
        if (done_.load(std::memory_order_acquire)) break;  // completed while the lock was released
        throw_if_failed_or_late(f, deadline, timeout_s);
        eng_.done_cv_.wait_until(lk, std::min(deadline, Clock::now() + std::chrono::milliseconds(100)));
      }
    }
  }
  std::lock_guard lk(eng_.done_mu_);
  if (!error_.empty()) throw RuntimeFailure(error_);
}

// --- all-reduce ---------------------------------------------------------------

// Runs on the progress thread: phase 0 sends every owner its chunk and
// accumulates this member's chunk in rank order; phase 1 sends the result
// to every member and receives theirs. The chunks are ranges of the
// tensors' concatenation, moved as one message per (chunk, tensor) piece
// straight from and into the tensors: no packed copy to make on the
// caller's thread and unpack at the end (for a 6 MB bucket, two passes over
// cold memory and a fresh allocation's page faults). Every member cuts the
// same pieces (the same shapes), so messages of one (peer, tag) match in
// order; each element is still the sum of the members' in rank order.
class ShmAllReduce : public std::enable_shared_from_this<ShmAllReduce> {
 public:
  ShmAllReduce(ShmEngineImpl& e, std::vector<int> ranks, int me, int64_t tag, std::vector<Tensor> tensors,
               ReduceOp op, std::shared_ptr<ShmOp> req)
      : e_(e), ranks_(std::move(ranks)), me_(me), tag_(tag), tensors_(std::move(tensors)), op_(op),
        req_(std::move(req)) {
    for (auto& t : tensors_) {
      PD_CHECK(t.dtype() == DType::F32, "all-reduce takes f32 tensors, got ", dtype_name(t.dtype()));
      PD_CHECK(t.device().is_cpu(), "the MPI transport all-reduces host tensors only");
      starts_.push_back(count_);
      count_ += static_cast<size_t>(t.numel());
    }
    starts_.push_back(count_);
  }

  void start() {
    const int n = static_cast<int>(ranks_.size());
    auto self = shared_from_this();
    for (int k = 0; k < n; ++k) {
      if (k == me_) continue;
      for (const Piece& q : pieces(k)) {
        ++phase0_pending_;
        send(k, 0, q.p, q.len, [self] { self->phase0_step(); });
      }
    }
    // The order in which this owner adds the members' parts: rank order,
    // with its own part already in place when it is 0 or 1.
    if (chunk_len(me_) > 0) {
      ++phase0_pending_;
      if (me_ >= 2)
        for (const Piece& q : pieces(me_)) own_.insert(own_.end(), q.p, q.p + q.len);
      for (int k = me_ >= 2 ? 0 : 1; k < n; ++k) order_.push_back(k == 1 && me_ == 1 ? 0 : k);
      next_part();
    }
    if (phase0_pending_ == 0) phase1();
  }

 private:
  struct Piece {
    float* p;
    size_t len;
  };

  size_t chunk_begin(int k) const { return count_ * k / ranks_.size(); }
  size_t chunk_len(int k) const { return chunk_begin(k + 1) - chunk_begin(k); }
  int64_t tag(int phase) const { return tag_ * 2 + phase; }

  // Member k's chunk as pieces of the tensors, in order, none empty.
  std::vector<Piece> pieces(int k) {
    std::vector<Piece> out;
    const size_t begin = chunk_begin(k), end = chunk_begin(k + 1);
    for (size_t t = 0; t < tensors_.size(); ++t) {
      const size_t b = std::max(begin, starts_[t]), e = std::min(end, starts_[t + 1]);
      if (b < e) out.push_back({tensors_[t].f32() + (b - starts_[t]), e - b});
    }
    return out;
  }

  void fail(const std::string& err) {
    if (failed_) return;
    failed_ = true;
    ShmEngineImpl::complete(*req_, err);
  }

  void send(int k, int phase, const float* p, size_t len, std::function<void()> then) {
    auto m = std::make_shared<OutMsg>();
    m->h.kind = MsgKind::Collective;
    m->h.tag = tag(phase);
    m->h.nbytes = len * 4;
    m->data = reinterpret_cast<const char*>(p);
    auto self = shared_from_this();
    m->done = [self, then = std::move(then)](const std::string& err) {
      if (!err.empty()) return self->fail(cat(self->req_->what_, ": ", err));
      then();
    };
    e_.post_send(e_.global_to_local(ranks_[k]), m);
  }

  void recv(int k, int phase, float* p, size_t len, Combine c, std::function<void()> then) {
    auto in = std::make_shared<InPost>();
    in->kind = MsgKind::Collective;
    in->tag = tag(phase);
    in->peer = ranks_[k];
    in->what = cat(req_->what_, " with rank ", ranks_[k]);
    in->raw = reinterpret_cast<char*>(p);
    in->raw_bytes = len * 4;
    in->combine = c;
    auto self = shared_from_this();
    in->done = [self, then = std::move(then)](InPost& q) {
      if (!q.error.empty()) return self->fail(q.error);
      then();
    };
    req_->waiting_peer_ = ranks_[k];
    e_.post_recv(e_.global_to_local(ranks_[k]), in);
  }

  // Adds the next member's part of this owner's chunk (one member at a
  // time, so the order of additions is rank order whatever arrives first).
  void next_part() {
    const std::vector<Piece> mine = pieces(me_);
    while (next_ < order_.size()) {
      const int k = order_[next_++];
      if (k == me_) {
        size_t off = 0;
        for (const Piece& q : mine) {
          add_floats(q.p, own_.data() + off, q.len, Combine::AccPlusIn);
          off += q.len;
        }
        continue;
      }
      // Member 0's part lands first: copied when this owner is not 0 or 1,
      // added in front of member 1's when it is 1.
      Combine c = Combine::AccPlusIn;
      if (k == 0) c = me_ == 1 ? Combine::InPlusAcc : Combine::Copy;
      auto self = shared_from_this();
      // The last piece's completion (possibly inside its recv, when the
      // message is there already) moves on to the next member.
      parts_pending_ = mine.size();
      for (const Piece& q : mine)
        recv(k, 0, q.p, q.len, c, [self] {
          if (--self->parts_pending_ == 0) self->next_part();
        });
      return;
    }
    if (op_ == ReduceOp::Average) {
      const float n = static_cast<float>(ranks_.size());
      for (const Piece& q : mine)
        for (size_t e = 0; e < q.len; ++e) q.p[e] = q.p[e] / n;
    }
    phase0_step();
  }

  void phase0_step() {
    if (--phase0_pending_ == 0 && !failed_) phase1();
  }

  void phase1() {
    const int n = static_cast<int>(ranks_.size());
    const std::vector<Piece> mine = pieces(me_);
    auto self = shared_from_this();
    auto step = [self] {
      if (--self->phase1_pending_ == 0 && !self->failed_) self->finish();
    };
    phase1_pending_ = 1;  // released below, after everything is posted
    for (int k = 0; k < n; ++k) {
      if (k == me_) continue;
      for (const Piece& q : mine) {
        ++phase1_pending_;
        send(k, 1, q.p, q.len, step);
      }
      for (const Piece& q : pieces(k)) {
        ++phase1_pending_;
        recv(k, 1, q.p, q.len, Combine::Copy, step);
      }
    }
    step();
  }

  void finish() { ShmEngineImpl::complete(*req_, ""); }

  ShmEngineImpl& e_;
  std::vector<int> ranks_;
  int me_;
  int64_t tag_;
  std::vector<Tensor> tensors_;
  ReduceOp op_;
  std::shared_ptr<ShmOp> req_;
  size_t count_ = 0;
  std::vector<size_t> starts_;  // tensor t spans [starts_[t], starts_[t + 1]) of the concatenation
  std::vector<float> own_;
  std::vector<int> order_;
  size_t next_ = 0, parts_pending_ = 0;
  int phase0_pending_ = 0, phase1_pending_ = 0;
  bool failed_ = false;
};

Request ShmEngineImpl::all_reduce(const std::vector<int>& ranks, int my_index, int64_t tag,
                                  std::vector<Tensor> tensors, ReduceOp op) {
  size_t total = 0;
  for (auto& t : tensors) total += static_cast<size_t>(t.numel());
  auto req = std::make_shared<ShmOp>(
      *this, cat("all-reduce of ", bytes_text(static_cast<double>(total) * 4), " in group ", ranks_text(ranks)),
      ranks[my_index == 0 && ranks.size() > 1 ? 1 : 0]);
  auto ar = std::make_shared<ShmAllReduce>(*this, ranks, my_index, tag, std::move(tensors), op, req);
  submit([ar] { ar->start(); });
  return Request(req);
}

// --- ShmEngine ------------------------------------------------------------------

ShmEngine::ShmEngine(ShmSegment segment, int world_rank, std::vector<int> local_of, double timeout_s,
                     std::function<std::string()> failure, bool core_handoff)
    : impl_(std::make_unique<ShmEngineImpl>(std::move(segment), world_rank, std::move(local_of), timeout_s,
                                            std::move(failure), core_handoff)) {}

ShmEngine::~ShmEngine() = default;

bool ShmEngine::reaches(int world_rank) const { return impl_->global_to_local(world_rank) >= 0; }

Request ShmEngine::send(const Tensor& t, int peer, int tag, int64_t meta) { return impl_->send(t, peer, tag, meta); }

Request ShmEngine::recv(Tensor into, int peer, int tag) { return impl_->recv(std::move(into), peer, tag); }

Request ShmEngine::all_reduce(const std::vector<int>& group_ranks, int my_index, int64_t tag,
                              std::vector<Tensor> tensors, ReduceOp op) {
  return impl_->all_reduce(group_ranks, my_index, tag, std::move(tensors), op);
}

void ShmEngine::set_timeout(double s) { impl_->set_timeout(s); }

void ShmEngine::stop(bool drain) { impl_->stop(drain); }

uint64_t ShmEngine::ring_bytes() const { return impl_->ring_bytes(); }

}  // namespace pd
