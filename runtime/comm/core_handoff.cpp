#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "runtime/comm/core_handoff.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <strings.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

#include "core/error.h"
#include "core/text.h"

namespace pd {

CoreHandoffMode core_handoff_mode_from_env() {
  const char* v = std::getenv("PIPEDREAM_CORE_HANDOFF");
  if (!v || !*v || strcasecmp(v, "auto") == 0) return CoreHandoffMode::kAuto;
  if (strcasecmp(v, "on") == 0) return CoreHandoffMode::kOn;
  if (strcasecmp(v, "off") == 0) return CoreHandoffMode::kOff;
  throw UserError(cat("PIPEDREAM_CORE_HANDOFF must be auto, on or off, got '", v, "'"));
}

bool core_handoff_enabled(CoreHandoffMode mode, int host_ranks) {
  if (mode != CoreHandoffMode::kAuto) return mode == CoreHandoffMode::kOn;
  cpu_set_t mine;
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) return false;
  return host_ranks > CPU_COUNT(&mine);
}

int choose_thread_to_move(int my_cpu, const std::vector<RunnableThread>& peers) {
  std::map<int, int> on_cpu;
  for (const RunnableThread& p : peers) ++on_cpu[p.cpu];
  if (on_cpu.count(my_cpu)) return -1;
  int busiest = -1, most = 1;
  for (const auto& [cpu, n] : on_cpu) {
    bool movable = false;
    for (const RunnableThread& p : peers) movable |= p.cpu == cpu && p.may_run_here;
    if (n > most && movable) busiest = cpu, most = n;
  }
  if (busiest < 0) return -1;
  for (const RunnableThread& p : peers)
    if (p.cpu == busiest && p.may_run_here) return p.tid;
  return -1;
}

namespace {

// The state letter and the core of a thread of any process, from its
// /proc/<tid>/stat (fields 3 and 39); false when it is gone.
bool parse_thread_cpu(int fd, char* state, int* cpu) {
  char buf[1024];
  const ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return false;
  buf[n] = '\0';
  const char* p = strrchr(buf, ')');  // the name in parentheses may hold spaces
  if (!p || p[1] != ' ') return false;
  p += 2;
  *state = *p;
  for (int field = 3; field < 39; ++p) {
    if (*p == '\0') return false;
    if (*p == ' ') ++field;
  }
  *cpu = std::atoi(p);
  return true;
}

}  // namespace

CoreHandoff::~CoreHandoff() {
  for (const auto& [tid, fd] : stat_fds_) close(fd);
}

// Kept open: a pread of an open /proc file costs a third of opening it.
bool CoreHandoff::read_thread_cpu(int tid, char* state, int* cpu) {
  auto it = stat_fds_.find(tid);
  if (it == stat_fds_.end()) {
    char path[48];
    snprintf(path, sizeof path, "/proc/%d/stat", tid);
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    it = stat_fds_.emplace(tid, fd).first;
  }
  return parse_thread_cpu(it->second, state, cpu);
}

int CoreHandoff::offer_my_core(const std::vector<int>& peer_tids) {
  if (!enabled()) return -1;
  std::unique_lock lk(mu_, std::try_to_lock);
  if (!lk.owns_lock()) return -1;  // another of this rank's threads is offering the same core
  const int my_cpu = sched_getcpu();
  if (my_cpu < 0) return -1;
  std::vector<RunnableThread> runnable;
  std::vector<cpu_set_t> masks;
  for (int tid : peer_tids) {
    char state = 0;
    int cpu = -1;
    if (tid <= 0 || !read_thread_cpu(tid, &state, &cpu) || state != 'R') continue;
    // A mask of one core is either a binding (then a thread may not come)
    // or another rank's hand-off in flight, which would be given back as
    // this thread's own mask and pin it.
    cpu_set_t mask;
    CPU_ZERO(&mask);  // copied into masks below even when unknown
    const bool known = sched_getaffinity(tid, sizeof mask, &mask) == 0;
    runnable.push_back({tid, cpu, known && CPU_COUNT(&mask) > 1 && CPU_ISSET(my_cpu, &mask)});
    masks.push_back(mask);
  }
  const int tid = choose_thread_to_move(my_cpu, runnable);
  if (tid < 0) return -1;
  size_t i = 0;
  while (runnable[i].tid != tid) ++i;
  cpu_set_t here;
  CPU_ZERO(&here);
  CPU_SET(my_cpu, &here);
  if (sched_setaffinity(tid, sizeof here, &here) != 0) {
    if (errno == EPERM) enabled_.store(false, std::memory_order_relaxed);  // not ours to move
    return -1;
  }
  sched_setaffinity(tid, sizeof masks[i], &masks[i]);  // it stays here: the kernel moves a thread only off a core its mask leaves out
  return tid;
}

}  // namespace pd
