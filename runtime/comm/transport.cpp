// Parts of the Transport contract that do not depend on the implementation.
#include "runtime/comm/transport.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "core/error.h"
#include "core/text.h"

namespace pd {

bool Request::test() { return state_ ? state_->test() : true; }
void Request::wait(double timeout_s) {
  if (state_) state_->wait(timeout_s);
}
Tensor Request::tensor() const { return state_ ? state_->tensor() : Tensor{}; }
int64_t Request::meta() const { return state_ ? state_->meta() : 0; }

namespace {
AbortReporter g_abort_reporter = nullptr;
}  // namespace

void set_abort_reporter(AbortReporter reporter) { g_abort_reporter = reporter; }
AbortReporter abort_reporter() { return g_abort_reporter; }

void wait_all(std::vector<Request>& requests, double timeout_s) {
  for (auto& r : requests) r.wait(timeout_s);
}

std::shared_ptr<CommGroup> Transport::world_group() {
  if (!world_) {
    std::vector<int> all(world_size());
    std::iota(all.begin(), all.end(), 0);
    world_ = make_group(all);
  }
  return world_;
}

void Transport::all_reduce(CommGroup& g, std::vector<Tensor> tensors, ReduceOp op) {
  iall_reduce(g, std::move(tensors), op).wait();
}

void Transport::barrier(CommGroup& g) {
  // A one-float all-reduce: same timeout and culprit reporting as data.
  Tensor token = Tensor::zeros({1});
  all_reduce(g, {token}, ReduceOp::Sum);
}

void Transport::barrier() { barrier(*world_group()); }

namespace {
std::atomic<int> g_stop_signals{0};
char g_rank_prefix[48] = "pipedream: ";
// Two buffers and an index so the handler never reads a half-written text.
char g_blocked_text[2][200];
std::atomic<int> g_blocked_slot{-1};

void write_str(const char* s) {
  size_t n = 0;
  while (s[n]) ++n;
  ssize_t ignored = write(STDERR_FILENO, s, n);
  (void)ignored;
}

void on_stop_signal(int sig) {
  if (g_stop_signals.fetch_add(1) > 0) {
    // Second signal: the user (or launcher) does not want a clean stop.
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  write_str(g_rank_prefix);
  if (sig == SIGINT) {
    write_str("interrupted; stopping after the current minibatch (again to kill)");
  } else {
    write_str("SIGTERM (mpirun sends it on Ctrl-C and when another rank died or aborted); stopping");
  }
  int slot = g_blocked_slot.load();
  if (slot >= 0) {
    write_str("; was ");
    write_str(g_blocked_text[slot]);
  }
  write_str("\n");
}
}  // namespace

bool Transport::stop_requested() { return g_stop_signals.load(std::memory_order_relaxed) > 0; }

bool Transport::any_rank_stopping() {
  Tensor flag = Tensor::full({1}, stop_requested() ? 1.0f : 0.0f);
  all_reduce(*world_group(), {flag}, ReduceOp::Sum);
  return flag.f32()[0] > 0.0f;
}

void note_rank_for_signals(int rank) {
  snprintf(g_rank_prefix, sizeof g_rank_prefix, "pipedream: rank %d: ", rank);
}

void note_blocked_on(const char* what) {
  if (!what) {
    g_blocked_slot.store(-1);
    return;
  }
  int next = g_blocked_slot.load() == 0 ? 1 : 0;
  snprintf(g_blocked_text[next], sizeof g_blocked_text[next], "%s", what);
  g_blocked_slot.store(next);
}

void install_stop_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

void reduce_in_rank_order(const std::vector<const float*>& in, float* out, size_t count,
                          ReduceOp op) {
  PD_CHECK(!in.empty());
  const size_t n = in.size();
  const float scale_div = static_cast<float>(n);
  // Blocked so the accumulator stays in cache and the loops vectorize; the
  // per-element order of additions is fixed: rank 0, 1, 2, ...
  constexpr size_t kBlock = 1024;
  float acc[kBlock];
  for (size_t b = 0; b < count; b += kBlock) {
    const size_t len = std::min(kBlock, count - b);
    for (size_t e = 0; e < len; ++e) acc[e] = in[0][b + e];
    for (size_t k = 1; k < n; ++k) {
      const float* x = in[k] + b;
      for (size_t e = 0; e < len; ++e) acc[e] += x[e];
    }
    if (op == ReduceOp::Average) {
      for (size_t e = 0; e < len; ++e) out[b + e] = acc[e] / scale_div;
    } else {
      for (size_t e = 0; e < len; ++e) out[b + e] = acc[e];
    }
  }
}

bool launched_under_mpi() {
  // Open MPI's mpirun, MPICH/Hydra and srun (PMI or PMIx) set these.
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"})
    if (std::getenv(var)) return true;
  return false;
}

// Through each thread's CPU clock (nanoseconds).
double comm_threads_cpu_s() {
  double total = 0;
  DIR* dir = opendir("/proc/self/task");
  if (!dir) return 0;
  while (dirent* e = readdir(dir)) {
    if (e->d_name[0] == '.') continue;
    std::ifstream name_file(cat("/proc/self/task/", e->d_name, "/comm"));
    std::string name;
    std::getline(name_file, name);
    if (name != "pd-comm" && name != "pd-shm") continue;
    const pid_t tid = static_cast<pid_t>(std::atol(e->d_name));
    // The kernel's clock id of another thread's CPU time (CPUCLOCK_SCHED, per thread).
    const clockid_t clock = static_cast<clockid_t>((~static_cast<unsigned>(tid) << 3) | 6u);
    timespec ts{};
    if (clock_gettime(clock, &ts) == 0) total += double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
  }
  closedir(dir);
  return total;
}

}  // namespace pd
