// MpiTransport: the Transport interface over the engine (mpi_engine.h),
// point-to-point (mpi_p2p.h) and all-reduce (mpi_allreduce.h). See
// mpi_transport.h for why one thread owns MPI.
#include "runtime/comm/mpi_transport.h"

// C API only: Open MPI's mpi.h would otherwise drag in the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <strings.h>
#include <condition_variable>
#include <cstdio>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/comm/core_handoff.h"
#include "runtime/comm/mpi_allreduce.h"
#include "runtime/comm/mpi_engine.h"
#include "runtime/comm/mpi_p2p.h"
#include "runtime/comm/shm_engine.h"
#include "core/error.h"
#include "core/text.h"

namespace pd {

MpiTransport::MpiTransport(double timeout_s) {
  int initialized = 0;
  PD_MPI_CHECK(MPI_Initialized(&initialized));
  int provided = MPI_THREAD_SINGLE;
  if (!initialized) {
    PD_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided));
    we_initialized_mpi_ = true;
  } else {
    PD_MPI_CHECK(MPI_Query_thread(&provided));
  }
  if (provided < MPI_THREAD_SERIALIZED)
    throw RuntimeFailure(cat("this MPI library provides thread level ", provided,
                             "; pipedream needs MPI_THREAD_SERIALIZED (its communication thread "
                             "calls MPI). Rebuild MPI with thread support."));
  PD_MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank_));
  PD_MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size_));
  note_rank_for_signals(rank_);
  install_stop_signal_handlers();

  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int len = 0;
  PD_MPI_CHECK(MPI_Get_processor_name(name, &len));
  std::vector<char> all(static_cast<size_t>(size_) * MPI_MAX_PROCESSOR_NAME);
  PD_MPI_CHECK(MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all.data(), MPI_MAX_PROCESSOR_NAME,
                             MPI_CHAR, MPI_COMM_WORLD));
  for (int r = 0; r < size_; ++r) hosts_.emplace_back(all.data() + static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME);

  start_same_host_path(timeout_s);
  engine_ = std::make_unique<MpiEngine>(rank_, timeout_s);
}

namespace {
bool shm_wanted() {
  const char* v = std::getenv("PIPEDREAM_SHM");
  return !(v && (std::strcmp(v, "0") == 0 || strcasecmp(v, "off") == 0 || strcasecmp(v, "false") == 0));
}

uint64_t shm_ring_bytes() {
  const char* v = std::getenv("PIPEDREAM_SHM_RING_BYTES");
  if (!v || !*v) return kShmDefaultRingBytes;
  char* end = nullptr;
  const unsigned long long b = std::strtoull(v, &end, 10);
  if (*end != '\0' || b < kShmMinRingBytes)
    throw UserError(cat("PIPEDREAM_SHM_RING_BYTES must be a byte count of at least ", kShmMinRingBytes, ", got '", v,
                        "'"));
  return b;
}
}  // namespace

// Collective over MPI_COMM_WORLD, before the communication thread starts.
void MpiTransport::start_same_host_path(double timeout_s) {
  MPI_Comm node;
  PD_MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &node));
  int n = 1, node_rank = 0, want = shm_wanted(), all_want = 0;
  PD_MPI_CHECK(MPI_Comm_size(node, &n));
  PD_MPI_CHECK(MPI_Comm_rank(node, &node_rank));
  PD_MPI_CHECK(MPI_Allreduce(&want, &all_want, 1, MPI_INT, MPI_MIN, node));
  const CoreHandoffMode handoff_mode = core_handoff_mode_from_env();  // a bad value is an error on any host
  if (all_want && n > 1) {
    const bool handoff = core_handoff_enabled(handoff_mode, n);
    const char* ring_env = std::getenv("PIPEDREAM_SHM_RING_BYTES");
    ShmSegment seg = ShmSegment::create(node, shm_ring_bytes(), !(ring_env && *ring_env));
    if (seg.ok()) {
      std::vector<int> members(static_cast<size_t>(n));
      PD_MPI_CHECK(MPI_Allgather(&rank_, 1, MPI_INT, members.data(), 1, MPI_INT, node));
      std::vector<int> local_of(static_cast<size_t>(size_), -1);
      for (int i = 0; i < n; ++i) local_of[members[i]] = i;
      shm_ = std::make_unique<ShmEngine>(std::move(seg), rank_, std::move(local_of), timeout_s,
                                         [this] { return engine_ ? engine_->failure() : std::string(); }, handoff);
      shm_on_ = true;
    } else if (node_rank == 0) {
      fprintf(stderr, "pipedream: note: same-host transfers go through MPI: %s\n", seg.why().c_str());
      fflush(stderr);
    }
  }
  PD_MPI_CHECK(MPI_Comm_free(&node));
}

bool MpiTransport::uses_shared_memory(int peer) const {
  return shm_on_ && peer >= 0 && peer < size_ && peer != rank_ && shm_->reaches(peer);
}

bool MpiTransport::uses_shared_memory(const CommGroup& g) const {
  if (!shm_on_ || g.size() < 2) return false;
  for (int r : g.ranks())
    if (!shm_->reaches(r)) return false;
  return true;
}

bool MpiTransport::use_shared_memory(bool on) {
  shm_on_ = on && shm_ != nullptr;
  return shm_on_;
}

MpiTransport::~MpiTransport() {
  if (shut_down_) return;
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
    if (shm_) shm_->stop(false);
    engine_->stop(false);
    fflush(stderr);
    return;
  }
  try {
    shutdown();
  } catch (const std::exception& e) {
    fprintf(stderr, "pipedream: error: rank %d: %s\n", rank_, e.what());
    fflush(stderr);
  }
}

void MpiTransport::shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  if (shm_) shm_->stop(true);
  engine_->stop(true);
  engine_->finalize_comms();
  if (we_initialized_mpi_) PD_MPI_CHECK(MPI_Finalize());
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
}  // namespace

Request MpiTransport::isend(const Tensor& t, int peer, int tag, int64_t meta) {
  check_peer(peer, size_, rank_, "isend");
  PD_CHECK(tag >= 0 && tag <= max_tag(), "tag ", tag, " outside [0, ", max_tag(), "]");
  if (uses_shared_memory(peer)) return shm_->send(t, peer, tag, meta);
  return start_mpi_send(*engine_, t, peer, tag, meta);
}

Request MpiTransport::irecv(Tensor into, int peer, int tag) {
  check_peer(peer, size_, rank_, "irecv");
  PD_CHECK(tag >= 0 && tag <= max_tag(), "tag ", tag, " outside [0, ", max_tag(), "]");
  PD_CHECK(into.defined(), "irecv needs an allocated tensor; use irecv_any for unknown shapes");
  if (uses_shared_memory(peer)) return shm_->recv(std::move(into), peer, tag);
  return start_mpi_recv(*engine_, std::move(into), peer, tag);
}

Request MpiTransport::irecv_any(int peer, int tag) {
  check_peer(peer, size_, rank_, "irecv_any");
  PD_CHECK(tag >= 0 && tag <= max_tag(), "tag ", tag, " outside [0, ", max_tag(), "]");
  if (uses_shared_memory(peer)) return shm_->recv(Tensor{}, peer, tag);
  return start_mpi_recv(*engine_, Tensor{}, peer, tag);
}

std::shared_ptr<CommGroup> MpiTransport::make_group(std::vector<int> ranks) {
  return make_mpi_group(std::move(ranks), rank_, size_, max_tag());
}

Request MpiTransport::iall_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) {
  auto* group = dynamic_cast<MpiGroup*>(&g);
  PD_CHECK(group != nullptr, "iall_reduce: group was not made by this transport");
  if (uses_shared_memory(g)) {
    // The same tag on every member: the group's key and its sequence number.
    const int64_t tag = (static_cast<int64_t>(group->key()) << 32) | static_cast<uint32_t>(group->next_seq());
    return shm_->all_reduce(group->ranks(), group->index(), tag, std::move(tensors), op);
  }
  return start_mpi_all_reduce(*engine_, *group, std::move(tensors), op);
}

void MpiTransport::set_timeout(double seconds) {
  if (!(seconds > 0)) throw UserError(cat("--timeout must be positive seconds, got ", seconds));
  engine_->timeout_s_ = seconds;
  if (shm_) shm_->set_timeout(seconds);
}

double MpiTransport::timeout() const { return engine_->timeout_s_.load(); }

void MpiTransport::abort(const std::string& reason, int exit_code) {
  // Messages made here already start with "rank N: "; do not say it twice.
  const std::string prefix = cat("rank ", rank_, ": ");
  std::string why = reason.rfind(prefix, 0) == 0 ? reason : prefix + reason;
  if (!(abort_reporter() && abort_reporter()(why, exit_code))) {
    fprintf(stderr, "pipedream: error: %s\n", why.c_str());
    fflush(stderr);
  }
  const bool notify = !engine_->peers_notified_.exchange(true);
  engine_->submit([this, why, notify, exit_code] {
    if (notify) engine_->notify_peers(why, size_, std::chrono::milliseconds(300));
    MPI_Abort(MPI_COMM_WORLD, exit_code);  // returns only if it failed: then _exit below
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
