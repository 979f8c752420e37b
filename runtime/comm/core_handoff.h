#pragma once
// When the ranks of a host outnumber its cores, a rank about to sleep on a
// receive hands its core to another rank's thread queued behind a busy
// core. Left to itself, Linux keeps that core idle until its next load
// balance, up to a 4 ms tick later: an idle core's own balance will not
// pull a thread that ran in the last 0.5 ms (migration_cost), and threads
// sharing a core switch every millisecond or two. On 4 ranks over 2 cores
// that idled the cores 8-10% of a V schedule's steady state
// (docs/measurements.md, "Core hand-off"). The hand-off does what the
// kernel's balancer does a few milliseconds later: it restricts the queued
// thread's CPU mask to this core (the kernel moves it at once) and gives
// it its own mask back. Priorities are untouched.
//
// PIPEDREAM_CORE_HANDOFF=auto (default: on when the host's ranks outnumber
// the cores this process may run on), on, or off. Internal to
// runtime/comm/; ShmEngine calls it before a wait sleeps.
#include <atomic>
#include <map>
#include <mutex>
#include <vector>

namespace pd {

enum class CoreHandoffMode { kAuto, kOn, kOff };

// PIPEDREAM_CORE_HANDOFF; throws UserError on a value other than auto, on
// or off.
CoreHandoffMode core_handoff_mode_from_env();
// Whether the hand-off runs for `host_ranks` ranks sharing this host.
bool core_handoff_enabled(CoreHandoffMode mode, int host_ranks);

struct RunnableThread {
  int tid;
  int cpu;            // the core it runs on or is queued for
  bool may_run_here;  // its CPU mask allows the caller's core
};

// Which of the host's other ranks' runnable threads to move to `my_cpu`:
// none (-1) when one of them is already on my_cpu (it takes the core when
// the caller sleeps) or none waits behind another of them; otherwise one
// queued behind the busiest core. Pure: tests check the rule.
int choose_thread_to_move(int my_cpu, const std::vector<RunnableThread>& peers);

class CoreHandoff {
 public:
  explicit CoreHandoff(bool enabled) : enabled_(enabled) {}
  ~CoreHandoff();
  CoreHandoff(const CoreHandoff&) = delete;
  CoreHandoff& operator=(const CoreHandoff&) = delete;
  bool enabled() const { return enabled_.load(std::memory_order_relaxed); }
  // `peer_tids`: the compute threads of the host's other ranks (0: not
  // known yet). Reads where each runs (/proc/<tid>/stat), and moves the
  // one choose_thread_to_move picks onto the calling thread's core.
  // Returns its tid, or -1. The kernel refusing (another user's process)
  // turns the hand-off off for good. Any thread may call it.
  int offer_my_core(const std::vector<int>& peer_tids);

 private:
  bool read_thread_cpu(int tid, char* state, int* cpu);

  std::atomic<bool> enabled_;
  std::mutex mu_;                // one offer at a time; guards stat_fds_
  std::map<int, int> stat_fds_;  // tid -> its /proc/<tid>/stat, open
};

}  // namespace pd
