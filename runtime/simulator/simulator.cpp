#include "runtime/simulator/simulator.h"

#include "planner/plan_ties.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "core/error.h"
#include "runtime/schedule/schedule_file.h"
#include "runtime/simulator/event_queue.h"

namespace pd {
namespace {

struct Message {
  int64_t tag;
  double arrival;
};

// Messages that arrived and were not yet received, and the one the worker
// waits for: the cache line a sender touches. Usually one or two messages
// (a pipeline neighbour is rarely far ahead); more spill to a vector kept
// outside the worker's state, while the inline ones are full.
struct alignas(64) Mailbox {
  static constexpr uint32_t kInline = 3;
  Message inline_messages[kInline];
  uint32_t size = 0;
  int64_t wait_tag = -1;  // the worker is blocked on this message

  Message& at(uint32_t i, std::vector<Message>& spill) {
    return i < kInline ? inline_messages[i] : spill[i - kInline];
  }
  void push_back(const Message& m, std::vector<Message>& spill) {
    if (size < kInline) inline_messages[size] = m;
    else spill.push_back(m);
    ++size;
  }
  void erase_unordered(uint32_t i, std::vector<Message>& spill) {
    at(i, spill) = at(size - 1, spill);
    if (size > kInline) spill.pop_back();
    --size;
  }
};

struct PeerTransfer {
  int peer = -1;
  double seconds = 0;  // one message's time on the link
};

// A worker's state: nine cache lines, prefetched whole before its event.
struct alignas(64) WorkerState {
  // What every event touches.
  uint8_t head = 0, count = 0;  // pending[head] is the current action when head < count
  bool computing = false;
  bool replicated = false;      // its stage has replicas: steps wait for all-reduces
  bool backward_just_done = false;  // its last action was a whole backward (the round's buckets went with it)
  int8_t forward_line = -1, backward_line = -1;  // the event queue's delay lines for its compute ends
  int stage = 0;
  double forward_s = 0, backward_s = 0, weight_s = 0;  // its stage's compute times (chunk 0)
  double step_s = 0;  // the optimizer step as its own compute (StageCost::step_s)
  int8_t weight_line = -1;
  double compute_start = 0, compute_end = 0;
  double busy = 0;
  double round_start = 0;   // start of the compute an all-reduce may overlap
  Mailbox mailbox;
  PackedAction pending[ActionSource::kMaxGroup];
  int64_t in_flight = 0, peak_in_flight = 0;
  int64_t held = 0, peak_held = 0;         // F until the last backward pass (W for zb-h1)
  uint64_t held_bytes = 0, peak_held_bytes = 0;
  // Shared cores: the time slice the message it waits for may still wait
  // for once it crosses its link, decided at that moment (busy_latency).
  double slice_wait_s = 0;
  // The working memory of the compute running (0 between computes), and
  // the peak of it with the held stashes. A message sent to the worker is
  // not its memory until its receive takes it: the runtime leaves it with
  // the transport until then (runtime/comm/README.md), and the receive
  // comes right before the compute it feeds.
  uint64_t working_bytes = 0, peak_working_bytes = 0;
  // A V's turn: what it sent itself (tag, bytes), its own from the send
  // (a copy, LoopbackTransport) until its receive takes it.
  std::vector<std::pair<int64_t, uint64_t>> to_itself;
  // Weight versions the in-flight minibatches use: their forwards' versions
  // never decrease, so counting distinct ones needs only the newest and,
  // when the oldest leaves, the version of the next one (from the source) -
  // no per-minibatch storage, which for long pipelines would be read back
  // from main memory a thousand minibatches after it was written.
  int64_t distinct_held = 0, newest_held = -1, backwards_done = 0;
  int64_t version = 0, peak_versions = 1;
  PeerTransfer peer_transfer[2];  // [0] upstream (gradients), [1] downstream (activations)
  ActionSource source;

  bool has_action() const { return head < count; }
  const PackedAction& action() const { return pending[head]; }
};

struct ReplicaGroup {
  int size = 1;
  int arrived = 0;
  double ready = 0;
  double channel_free = 0;
  int64_t completed_round = -1;
  int64_t rounds_run = 0;  // all-reduces run over the whole replay
  double round_start = 0, round_end = 0;
  double allreduce_s = 0;
  double allreduce_cpu_s = 0;  // shared cores: CPU each member's communication threads spend on one
  // The all-reduce starts when the last replica reaches the AllReduce
  // action and the replicas' steps wait until it ends (start_allreduce).
  bool blocking = false;
  std::vector<int> waiting;  // ranks blocked at the OptimizerStep
  // The runtime's buckets (SimulationOptions::gradient_buckets), in order:
  // each one's seconds on the channel, how far into the backward it is
  // ready, and this round's latest ready time over the members arrived.
  std::vector<double> bucket_s, bucket_fraction, bucket_ready;
};

struct StageCost {
  double forward_s, backward_s, weight_s;  // weight_s: zb-h1's W (backward_s is then B alone)
  // The optimizer step, where it is a compute of its own: a stage whose
  // replicas wait for the runtime's all-reduce steps after it ends, on the
  // path to its next backward (and so to the next round's all-reduce).
  // 0 elsewhere: the step is folded into the backward.
  double step_s = 0;
  double message_bytes;
  uint64_t stashed_bytes;
  uint64_t weight_pass_bytes;  // SimulationOptions::weight_pass_bytes, per item
  // SimulationOptions::weight_working_bytes (W; else working_bytes),
  // forward_working_bytes (F) and backward_working_bytes (B), per item.
  uint64_t working_bytes, backward_working_bytes, forward_working_bytes;
  int forward_line = -1, backward_line = -1, weight_line = -1;  // the event queue's delay lines; -1: none
};

// One all-reduce of `bytes` over the group: with the level's measured bus
// bandwidth, 2(r-1)/r x bytes at it (what bench-comm timed, whatever the
// algorithm and the links' duplex); otherwise the planner's ring on links
// whose bandwidth both directions share, 4(r-1)/r x bytes at the slowest
// link. Either way 2(r-1) messages' latency. With `cores_busy` (the
// workers share the cores) the bus bandwidth measured with the cores busy,
// where the topology has it.
double allreduce_seconds(const Topology& topology, const std::vector<int>& ranks, double bytes, bool cores_busy) {
  const double r = double(ranks.size());
  const double measured = topology.group_allreduce_GBps(ranks, cores_busy);
  const double transfer = measured > 0 ? 2.0 * (r - 1) / r * bytes / (measured * 1e9)
                                       : 4.0 * (r - 1) / r * bytes / (topology.group_bandwidth(ranks) * 1e9);
  return transfer + 2.0 * (r - 1) * topology.group_latency(ranks);
}

// More distinct compute times than this (a plan whose every stage differs)
// use the event queue's radix heap: finding the earliest of many delay
// lines would cost more than it saves.
constexpr size_t kMaxDelayLines = 16;

class Simulation {
 public:
  Simulation(const Plan& plan, const SimulationOptions& opt, std::vector<TraceEvent>* trace)
      : plan_(plan),
        opt_(opt),
        schedule_(plan, opt.schedule),
        trace_(opt.record_trace ? trace : nullptr) {
    const int R = schedule_.workers();
    if (plan.topology.levels.empty()) throw UserError("the plan has no topology: the simulator needs bandwidths");
    if (plan.topology.total_workers() < R)
      throw UserError(cat("the plan's topology has ", plan.topology.total_workers(), " workers but the plan uses ", R));
    // Per-stage byte figures: none, or one for every stage.
    const std::pair<const char*, const std::vector<uint64_t>*> per_stage[] = {
        {"weight-pass", &opt.weight_pass_bytes}, {"working", &opt.working_bytes},
        {"recompute", &opt.recompute_bytes}, {"stashed", &opt.stashed_bytes},
        {"forward working", &opt.forward_working_bytes}, {"backward working", &opt.backward_working_bytes},
        {"input-backward working", &opt.input_backward_working_bytes},
        {"weight working", &opt.weight_working_bytes}};
    for (const auto& [what, v] : per_stage)
      if (!v->empty() && v->size() != plan.stages.size())
        throw UserError(cat(what, " bytes are given for ", v->size(), " stages, the plan has ", plan.stages.size()));
    // Registry question (one of the sites runtime/schedule/README.md
    // counts): whether items are (batch, microbatch) with a step per batch
    // or minibatches with a step per round - which item marks the measured
    // window, and how actions are named. The rest is the built schedule's.
    flush_ = opt.schedule.kind->flushes();
    split_ = schedule_.has_weight_passes();
    chunks_ = schedule_.chunks();
    holds_versions_ = schedule_.holds_several_versions();
    if (!(opt.cores >= 0)) throw UserError(cat("the cores shared by the workers must be >= 0 (got ", opt.cores, ")"));
    if (opt.threads_per_worker < 1)
      throw UserError(cat("the threads per worker must be >= 1 (got ", opt.threads_per_worker, ")"));
    // Only when the workers' threads can exceed the cores does sharing slow
    // anything; otherwise the default replay is exactly right.
    if (!(opt.core_contention >= 0) || !std::isfinite(opt.core_contention))
      throw UserError(cat("the core contention must be a number >= 0 (got ", opt.core_contention, ")"));
    if (opt.core_contention > 0 && opt.cores == 0)
      throw UserError("core contention is a property of shared cores: give the cores too");
    shared_cores_ = opt.cores > 0 && (double(R) * opt.threads_per_worker > opt.cores || opt.core_contention > 0);
    if (!(opt.weight_gradient_share >= 0 && opt.weight_gradient_share < 1))
      throw UserError(cat("the weight-gradient share of the backward must be in [0, 1) (got ",
                          opt.weight_gradient_share, ")"));
    const double items = opt.schedule.microbatches;
    const double w_share = split_ ? opt.weight_gradient_share : 0.0;
    if (!opt.microbatch_times.empty() && opt.microbatch_times.size() != plan.stages.size())
      throw UserError(cat("microbatch times are given for ", opt.microbatch_times.size(), " stages, the plan has ",
                          plan.stages.size()));
    if (!opt.gradient_buckets.empty() && opt.gradient_buckets.size() != plan.stages.size())
      throw UserError(cat("gradient buckets are given for ", opt.gradient_buckets.size(), " stages, the plan has ",
                          plan.stages.size()));
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      const PlanStage& st = plan.stages[s];
      uint64_t stash = opt.stashed_bytes.empty() ? st.output_bytes : opt.stashed_bytes[s];
      const uint64_t weight_pass = opt.weight_pass_bytes.empty() ? stash : opt.weight_pass_bytes[s];
      // A microbatch's compute: measured at its size, or a linear share of the minibatch's.
      const bool measured = !opt.microbatch_times.empty();
      const double forward = measured ? opt.microbatch_times[s].forward_s : st.forward_s / items;
      ReplicaGroup g;
      g.size = st.replicas;
      g.blocking = waits_for_runtime_allreduce(plan, st, opt);
      // The optimizer step runs after a stage's last backward of a minibatch
      // (flush: of a batch). Where it waits for the all-reduce it is its own
      // compute; elsewhere nothing waits on it, and it is folded into the
      // backward, spread over the batch's microbatches.
      const double folded_step = g.blocking ? 0.0 : st.optimizer_s / items;
      const double backward = (measured ? opt.microbatch_times[s].backward_s : st.backward_s / items) + folded_step;
      // Activation recomputation: the recomputed layers' forward again, just before the backward (B).
      const double recompute = st.recompute_s / items;
      // A tied parameter's gradient exchange (planner/plan_ties.h) holds the step.
      const double step = (g.blocking ? st.optimizer_s : 0.0) + tie_exchange_s(plan, int(s));
      // Working memory: where W's context is measured, a recomputed
      // layer's activations made again are inside it (held from B on).
      const uint64_t working = opt.working_bytes.empty() ? 0 : opt.working_bytes[s];
      const uint64_t recomputed =
          opt.recompute_bytes.empty() || (split_ && !opt.weight_pass_bytes.empty()) ? 0 : opt.recompute_bytes[s];
      // F and B, where the profile gives them (a split B's with what W keeps).
      const uint64_t forward_working = opt.forward_working_bytes.empty() ? working : opt.forward_working_bytes[s];
      const std::vector<uint64_t>* b_working =
          !split_ ? &opt.backward_working_bytes : opt.weight_pass_bytes.empty() ? nullptr : &opt.input_backward_working_bytes;
      const uint64_t backward_working = !b_working || b_working->empty() ? working + recomputed : (*b_working)[s];
      const uint64_t weight_working = opt.weight_working_bytes.empty() ? working : opt.weight_working_bytes[s];
      const auto per_item = [&](double bytes) { return static_cast<uint64_t>(std::llround(bytes / items)); };
      costs_.push_back({forward, backward * (1 - w_share) + recompute, backward * w_share, step,
                        double(st.output_bytes) / items, per_item(double(stash)), per_item(double(weight_pass)),
                        per_item(double(weight_working)), per_item(double(backward_working)),
                        per_item(double(forward_working))});
      if (st.replicas > 1) {
        g.allreduce_s = allreduce_seconds(plan.topology, st.ranks, double(st.parameter_bytes), shared_cores_);
        // Each member sends and receives 2(r-1)/r of the bytes in 2(r-1) messages each way.
        const double r = double(st.replicas);
        const size_t all_reduces = set_buckets(g, st, opt.gradient_buckets.empty() ? nullptr : &opt.gradient_buckets[s],
                                               backward, folded_step);
        g.allreduce_cpu_s = plan.topology.group_comm_cpu(st.ranks)
                                .seconds(2 * 2.0 * (r - 1) / r * double(st.parameter_bytes),
                                         2 * 2.0 * (r - 1) * double(all_reduces));
      }
      groups_.push_back(g);
    }
    if (opt.actions) use_given_lists(*opt.actions);
    workers_.resize(R);
    for (int r = 0; r < R; ++r) {
      workers_[r].source = ActionSource(&schedule_, r);
      workers_[r].stage = schedule_.stage_of(r);
    }
    busy_at_mark_.resize(R);
    // Shared cores: ranks R..2R-1 of work_left_ are the workers' communication threads.
    if (shared_cores_) work_left_.assign(2 * size_t(R), 0.0);
    charges_comm_cpu_ = shared_cores_ && topology_charges_comm_cpu(plan.topology);
    spilled_.resize(R);
    link_free_.assign(R, 0.0);
    events_ = EventQueue(assign_delay_lines());
    for (WorkerState& w : workers_) {
      const StageCost& c = costs_[w.stage];
      w.forward_s = c.forward_s;
      w.backward_s = c.backward_s;
      w.weight_s = c.weight_s;
      w.step_s = c.step_s;
      w.forward_line = static_cast<int8_t>(c.forward_line);
      w.backward_line = static_cast<int8_t>(c.backward_line);
      w.weight_line = static_cast<int8_t>(c.weight_line);
      w.replicated = groups_[w.stage].size > 1;
    }
    choose_marks();
  }

  SimulationReport run() {
    for (int r = 0; r < schedule_.workers(); ++r) events_.push({0.0, r});
    if (shared_cores_) {
      run_sharing_cores();
    } else {
      while (!events_.empty()) {
        auto [t, r] = events_.pop();
        prefetch_worker(events_.peek_rank());
        now_ = t;
        advance(r);
      }
    }
    for (int r = 0; r < schedule_.workers(); ++r)
      if (workers_[r].has_action() || workers_[r].computing)
        throw std::logic_error(cat("simulator: rank ", r, " is blocked at ",
                                   format_action(workers_[r].action().unpack(), flush_), " (the schedule deadlocks)"));
    return report();
  }

 private:

  // The event loop with shared cores: compute ends are not events (their
  // time changes whenever another worker starts or ends a computation), so
  // each turn either ends the computation with the least work left, if it
  // ends no later than the next event, or processes that event.
  void run_sharing_cores() {
    constexpr double kNever = std::numeric_limits<double>::infinity();
    for (;;) {
      const double next_event = events_.empty() ? kNever : events_.peek_time();
      int first_done = -1;
      double least_left = kNever;
      for (int r : computing_ranks_)
        if (work_left_[r] < least_left) {
          least_left = work_left_[r];
          first_done = r;
        }
      if (first_done >= 0) {
        const double done_at = progress_time_ + least_left / compute_rate_;
        if (done_at <= next_event) {
          now_ = std::max(done_at, now_);
          progress_to(now_);
          work_left_[first_done] = 0;
          computing_ranks_.erase(std::find(computing_ranks_.begin(), computing_ranks_.end(), first_done));
          if (first_done >= schedule_.workers()) {  // a communication thread's CPU is spent: nothing waits on it
            --comm_threads_busy_;
            update_compute_rate();
            continue;
          }
          update_compute_rate();
          workers_[first_done].compute_end = now_;
          advance(first_done);
          continue;
        }
      }
      if (events_.empty()) return;
      auto [t, r] = events_.pop();
      now_ = t;
      advance(r);
    }
  }

  // Every running computation has advanced at the current rate since the
  // last change; charge that before the set of computing workers changes.
  void progress_to(double t) {
    const double done = (t - progress_time_) * compute_rate_;
    for (int r : computing_ranks_) work_left_[r] = std::max(0.0, work_left_[r] - done);
    progress_time_ = t;
  }

  // Every core is taken by a worker's computation. Communication threads'
  // CPU does not count: it comes in bursts of microseconds, not a time
  // slice's worth.
  bool cores_saturated() const {
    return double(computing_ranks_.size() - comm_threads_busy_) * opt_.threads_per_worker >= opt_.cores;
  }

  // Processor sharing: n computing workers of T threads each on C cores
  // run at min(1, C / (n T)) of their own-device speed, and slower by the
  // contention for what the busy cores share.
  void update_compute_rate() {
    const double threads =
        double(computing_ranks_.size() - comm_threads_busy_) * opt_.threads_per_worker + double(comm_threads_busy_);
    compute_rate_ = threads > opt_.cores ? opt_.cores / threads : 1.0;
    if (opt_.core_contention > 0 && opt_.cores > 1) {
      const double busy_beyond_one = std::max(0.0, std::min(threads, opt_.cores) - 1);
      compute_rate_ /= 1 + opt_.core_contention * busy_beyond_one / (opt_.cores - 1);
    }
  }

  // Shared cores: what a message waits beyond its link for the receiving
  // communication thread's time slice (TopologyLevel::latency_busy_us,
  // beyond latency_us, which the link's time holds already). The callers
  // charge it only while the cores are all taken by computations: with a
  // core free, the receiver's threads wake on it at once (latency_busy_us
  // is measured beside a spinning process per rank).
  double busy_latency(int from, int to) const {
    if (!shared_cores_) return 0.0;
    const Topology& t = plan_.topology;
    return std::max(0.0, t.latency_between(from, to, true) - t.latency_between(from, to));
  }

  static bool topology_charges_comm_cpu(const Topology& t) {
    for (const TopologyLevel& l : t.levels)
      if (l.comm_cpu_GBps > 0 || l.comm_cpu_us_per_message > 0) return true;
    return false;
  }

  // Shared cores: `cpu_s` more for rank r's communication thread, one more
  // thread on the cores until it is spent. It delays no message or
  // all-reduce (their time on the link is priced already), only the
  // computations it shares the cores with.
  void charge_comm_cpu(int r, double cpu_s) {
    if (!(cpu_s > 0)) return;
    progress_to(now_);
    const size_t thread = size_t(schedule_.workers()) + size_t(r);
    if (std::find(computing_ranks_.begin(), computing_ranks_.end(), int(thread)) == computing_ranks_.end()) {
      computing_ranks_.push_back(static_cast<int>(thread));
      ++comm_threads_busy_;
    }
    work_left_[thread] += cpu_s;
    comm_cpu_charged_s_ += cpu_s;
    update_compute_rate();
  }

  // One delay line per distinct compute time; returns how many.
  size_t assign_delay_lines() {
    std::vector<double> times;
    for (const StageCost& c : costs_)
      for (double t : {c.forward_s, c.backward_s, c.weight_s})
        if (std::find(times.begin(), times.end(), t) == times.end()) {
          times.push_back(t);
          if (times.size() > kMaxDelayLines) return 0;
        }
    auto line = [&](double t) { return static_cast<int>(std::find(times.begin(), times.end(), t) - times.begin()); };
    for (StageCost& c : costs_) {
      c.forward_line = line(c.forward_s);
      c.backward_line = line(c.backward_s);
      c.weight_line = line(c.weight_s);
    }
    return times.size();
  }

  int64_t schedule_period() const {
    std::vector<int> replicas;
    for (int s = 0; s < schedule_.stages(); ++s) replicas.push_back(schedule_.replicas(s));
    return replica_period(replicas);
  }

  void choose_marks() {
    const int64_t K = opt_.schedule.minibatches;
    // 1F1B-RR hands minibatch i to replica i mod r of every stage, so the
    // schedule repeats every lcm(r) minibatches: a window of whole periods
    // measures the period's rate, one of stage 0's r alone aliases the other
    // stages' rounds (up to 15% on 64-56-8). Too long a period for the
    // window: whole rounds of stage 0.
    int64_t step = flush_ ? 1 : schedule_period();
    if (step > K * 3 / 4 - K / 4) step = flush_ ? 1 : schedule_.replicas(0);
    mark_index_[0] = K / 4;
    mark_index_[1] = mark_index_[0] + (K * 3 / 4 - mark_index_[0]) / step * step;
    if (K < 8 || mark_index_[1] <= mark_index_[0]) {
      mark_index_[0] = -1;  // from the start to the last minibatch
      mark_index_[1] = K - 1;
    }
    mark_rank_ = schedule_.ranks(0)[0];
  }

  void mark(int which) {
    mark_time_[which] = now_;
    comm_cpu_at_mark_[which] = comm_cpu_charged_s_;
    for (size_t r = 0; r < workers_.size(); ++r) {
      const WorkerState& w = workers_[r];
      double partial = w.computing ? std::max(0.0, std::min(now_, w.compute_end) - w.compute_start) : 0.0;
      busy_at_mark_[r][which] = w.busy + partial;
    }
  }

  // Starts loading the state of the worker whose event comes next while
  // this one is processed: a thousand workers' state does not fit in L2,
  // and the event's work depends on it from its first instruction.
  void prefetch_worker(int rank) const {
    if (rank < 0) return;
    const char* p = reinterpret_cast<const char*>(&workers_[rank]);
    for (size_t offset = 0; offset < sizeof(WorkerState); offset += 64) __builtin_prefetch(p + offset);
  }

  void wake(int rank, double t) { events_.push({std::max(t, now_), rank}); }

  void advance(int r) {
    WorkerState& w = workers_[r];
    if (w.computing) finish_compute(r);
    for (;;) {
      if (!w.has_action() && !refill(r)) return;
      const PackedAction& a = w.action();
      // Tests, not a switch: a jump table's one indirect branch sees the
      // kinds of all workers interleaved and mispredicts nearly always;
      // these conditional branches each see a regular pattern.
      if (a.is_compute()) {
        start_compute(r);
        return;
      }
      if (a.is_send()) {
        send(r, a);
      } else if (a.is_recv()) {
        if (!receive(r, a.key)) return;
      } else if (a.kind == ActionKind::OptimizerStep) {
        if (!step(r, a)) return;
        if (w.step_s > 0) {  // finish_compute moves past it
          start_compute(r);
          return;
        }
      } else if (groups_[w.stage].blocking) {
        start_allreduce(r, a);
      } else {
        join_allreduce(r, a);
      }
      ++w.head;
    }
  }

  void use_given_lists(const std::vector<std::vector<Action>>& lists) {
    if (static_cast<int>(lists.size()) != schedule_.workers())
      throw UserError(cat("the schedule has ", lists.size(), " workers' lists, the plan ", schedule_.workers(),
                          " workers"));
    given_ = &lists;
    given_next_.assign(lists.size(), 0);
    given_forward_versions_.resize(lists.size());
    for (size_t r = 0; r < lists.size(); ++r)
      for (const Action& a : lists[r])
        if (a.kind == ActionKind::Forward) given_forward_versions_[r].push_back(a.weight_version);
  }

  // The worker's next group of actions; false when it has none left.
  bool refill(int r) {
    WorkerState& w = workers_[r];
    w.head = 0;
    if (!given_) {
      w.count = static_cast<uint8_t>(w.source.next_group(w.pending));
    } else {
      const std::vector<Action>& list = (*given_)[r];
      size_t& next = given_next_[r];
      int n = 0;
      while (n < ActionSource::kMaxGroup && next < list.size()) w.pending[n++] = pack(list[next++]);
      w.count = static_cast<uint8_t>(n);
    }
    return w.count > 0;
  }

  // The version of the worker's `local`-th forward (-1: it has none).
  int64_t forward_version(int r, int64_t local) const {
    if (!given_) return workers_[r].source.forward_version(local);
    const auto& versions = given_forward_versions_[r];
    return local < static_cast<int64_t>(versions.size()) ? versions[static_cast<size_t>(local)] : -1;
  }

  // The duration and delay line of a computation: the worker's own stage's
  // (cached), or for an interleaved worker's other chunks that chunk's stage.
  std::pair<double, int> compute_cost(const WorkerState& w, const PackedAction& a) const {
    if (a.kind == ActionKind::OptimizerStep) return {w.step_s, -1};
    if (a.chunk == 0) {
      if (a.kind == ActionKind::Forward) return {w.forward_s, w.forward_line};
      if (a.kind == ActionKind::Backward) return {w.backward_s, w.backward_line};
      return {w.weight_s, w.weight_line};
    }
    const StageCost& c = costs_[static_cast<size_t>(schedule_.stage_of(static_cast<int>(&w - workers_.data()), a.chunk))];
    if (a.kind == ActionKind::Forward) return {c.forward_s, c.forward_line};
    if (a.kind == ActionKind::Backward) return {c.backward_s, c.backward_line};
    return {c.weight_s, c.weight_line};
  }

  const StageCost& cost_of(const WorkerState& w, const PackedAction& a) const {
    return costs_[static_cast<size_t>(schedule_.stage_of(static_cast<int>(&w - workers_.data()), a.chunk))];
  }
  uint64_t stashed_bytes(const WorkerState& w, const PackedAction& a) const { return cost_of(w, a).stashed_bytes; }

  void start_compute(int r) {
    WorkerState& w = workers_[r];
    const PackedAction& a = w.action();
    const bool fwd = a.kind == ActionKind::Forward;
    const auto [duration, line] = compute_cost(w, a);
    w.computing = true;
    w.backward_just_done = false;
    w.compute_start = now_;
    if (shared_cores_) {
      // Its end is found by run_sharing_cores: until then it is unknown.
      progress_to(now_);
      w.compute_end = std::numeric_limits<double>::infinity();
      work_left_[r] = duration;
      computing_ranks_.push_back(r);
      update_compute_rate();
    } else {
      w.compute_end = now_ + duration;
    }
    if (fwd == !flush_ && a.kind != ActionKind::BackwardWeight && a.kind != ActionKind::OptimizerStep)
      w.round_start = now_;
    if (fwd) {
      const bool another_version = w.in_flight == 0 || a.key != w.newest_held;
      w.peak_in_flight = std::max(w.peak_in_flight, ++w.in_flight);
      w.peak_held = std::max(w.peak_held, ++w.held);
      w.held_bytes += stashed_bytes(w, a);
      w.peak_held_bytes = std::max(w.peak_held_bytes, w.held_bytes);
      if (holds_versions_) {
        if (another_version) ++w.distinct_held;
        w.newest_held = a.key;
        count_versions(w);
      }
    }
    // The pass's working memory (the optimizer step's is not priced), a
    // backward's received gradient included.
    w.working_bytes = a.kind == ActionKind::OptimizerStep ? 0
                      : a.kind == ActionKind::Backward    ? cost_of(w, a).backward_working_bytes
                      : a.kind == ActionKind::Forward     ? cost_of(w, a).forward_working_bytes
                                                          : cost_of(w, a).working_bytes;
    w.peak_working_bytes = std::max(w.peak_working_bytes, w.held_bytes + w.working_bytes);
    if (shared_cores_) return;
    if (line >= 0) events_.push_delayed({w.compute_end, r}, static_cast<size_t>(line));
    else events_.push({w.compute_end, r});
  }

  void finish_compute(int r) {
    WorkerState& w = workers_[r];
    const PackedAction& a = w.action();
    w.computing = false;
    w.working_bytes = 0;
    w.backward_just_done = a.kind == ActionKind::Backward && !split_;
    w.busy += w.compute_end - w.compute_start;
    if (trace_) trace_->push_back({a.kind, r, a.sub, a.item, w.compute_start, w.compute_end, a.chunk});
    if (a.kind == ActionKind::Backward && split_) {  // B leaves what W needs in place of the stash
      w.held_bytes = w.held_bytes - stashed_bytes(w, a) + cost_of(w, a).weight_pass_bytes;
      w.peak_held_bytes = std::max(w.peak_held_bytes, w.held_bytes);
    }
    if (a.kind == ActionKind::Backward ? !split_ : a.kind == ActionKind::BackwardWeight) {
      --w.held;  // its last backward pass: the forward's tensors are freed
      w.held_bytes -= split_ ? cost_of(w, a).weight_pass_bytes : stashed_bytes(w, a);
    }
    if (a.kind == ActionKind::Backward) {
      --w.in_flight;
      if (holds_versions_) {
        const int64_t next = ++w.backwards_done;
        if (w.in_flight == 0 || forward_version(r, next) != a.key) --w.distinct_held;
      }
      if (!flush_ && w.stage == 0)
        for (int i = 0; i < 2; ++i)
          if (a.item == mark_index_[i]) mark(i);
    }
    ++w.head;
  }

  // Seconds one message from the worker to `peer` occupies the link. An
  // activation has the size of the sender's output, a gradient that of the
  // receiver's (the previous stage's). Most peers repeat (always, between
  // unreplicated stages), so each worker remembers the last one per
  // direction instead of asking the topology for every message.
  // The link's latency plus the bytes at its bandwidth.
  double message_seconds(int from, int to, double bytes) const {
    if (from == to) return 0;  // a V's turn: the tensor stays on the worker
    return plan_.topology.latency_between(from, to) + bytes / (plan_.topology.bandwidth_between(from, to) * 1e9);
  }

  double transfer_seconds(WorkerState& w, bool downstream, int peer, int chunk) {
    if (chunks_ > 1) {  // several stages per worker: the boundary depends on the chunk
      const int stage = schedule_.stage_of(static_cast<int>(&w - workers_.data()), chunk);
      const double bytes = costs_[static_cast<size_t>(downstream ? stage : stage - 1)].message_bytes;
      return message_seconds(static_cast<int>(&w - workers_.data()), peer, bytes);
    }
    PeerTransfer& c = w.peer_transfer[downstream ? 1 : 0];
    if (c.peer != peer) {
      double bytes = costs_[downstream ? w.stage : w.stage - 1].message_bytes;
      c = {peer, message_seconds(static_cast<int>(&w - workers_.data()), peer, bytes)};
    }
    return c.seconds;
  }


  void count_versions(WorkerState& w) {
    int64_t n = w.distinct_held;
    if (n == 0 || w.newest_held != w.version) ++n;
    w.peak_versions = std::max(w.peak_versions, n);
  }

  void send(int r, const PackedAction& a) {
    const bool activation = a.kind == ActionKind::SendActivation;
    const int downstream = activation ? a.peer : r;
    const double duration = transfer_seconds(workers_[r], activation, a.peer, a.chunk);
    const double start = std::max(now_, link_free_[downstream]);
    const double end = start + duration;
    link_free_[downstream] = end;
    if (charges_comm_cpu_) {
      const double cpu = plan_.topology.comm_cpu_between(r, a.peer).seconds(message_bytes(r, a, activation));
      charge_comm_cpu(r, cpu);       // the sender's thread, and
      charge_comm_cpu(a.peer, cpu);  // the receiver's, both from the send on
    }
    // Idealised: the link is a throughput limit only. A message is usable
    // at once unless the link's backlog ahead of it exceeds one transfer
    // (the other direction's message of the same minibatch), so the link's
    // busy time still bounds throughput at 2 C per minibatch but an
    // activation never waits behind a gradient.
    WorkerState& dst = workers_[a.peer];
    if (a.peer == r) hold_message_to_itself(dst, a.key, message_bytes(r, a, activation));
    const bool awaited = dst.mailbox.wait_tag == a.key;
    double arrival = std::max(now_, start - duration);
    if (opt_.realistic_latency) {
      // A receiver busy computing is woken by nobody: its communication
      // thread takes the message in a time slice of its own if the cores
      // are all taken now. A receiver blocked on it is woken when the
      // message is across, and waits for a slice if they are taken then.
      arrival = end;
      if (awaited) dst.slice_wait_s = busy_latency(r, a.peer);
      else if (cores_saturated()) arrival += busy_latency(r, a.peer);
    }
    dst.mailbox.push_back({a.key, arrival}, spilled_[a.peer]);
    if (awaited) {
      dst.mailbox.wait_tag = -1;
      wake(a.peer, arrival);
    }
  }

  // True when the message is here; otherwise the worker waits for it.
  bool receive(int r, int64_t tag) {
    Mailbox& box = workers_[r].mailbox;
    std::vector<Message>& spill = spilled_[r];
    for (uint32_t i = 0; i < box.size; ++i) {
      Message& m = box.at(i, spill);
      if (m.tag != tag) continue;
      if (m.arrival > now_) {
        wake(r, m.arrival);
        return false;
      }
      if (double& slice = workers_[r].slice_wait_s; slice > 0) {
        const bool wait = cores_saturated() && now_ < m.arrival + slice;
        if (wait) m.arrival += slice;
        slice = 0;
        if (wait) {
          wake(r, m.arrival);
          return false;
        }
      }
      box.erase_unordered(i, spill);
      release_message_to_itself(workers_[r], tag);
      return true;
    }
    box.wait_tag = tag;
    return false;
  }

  // One message of worker r's send `a`, per item: an activation has the
  // size of the sender's output, a gradient that of the stage before.
  double message_bytes(int r, const PackedAction& a, bool activation) const {
    const int stage = schedule_.stage_of(r, a.chunk);
    return costs_[static_cast<size_t>(activation ? stage : stage - 1)].message_bytes;
  }

  // The copy is made while the output it copies is still there.
  void hold_message_to_itself(WorkerState& w, int64_t tag, double message) {
    const uint64_t bytes = static_cast<uint64_t>(std::llround(message));
    w.to_itself.emplace_back(tag, bytes);
    w.held_bytes += bytes;
    w.peak_held_bytes = std::max(w.peak_held_bytes, w.held_bytes);
    if (!opt_.working_bytes.empty()) w.peak_working_bytes = std::max(w.peak_working_bytes, w.held_bytes + bytes);
  }

  void release_message_to_itself(WorkerState& w, int64_t tag) {
    for (auto it = w.to_itself.begin(); it != w.to_itself.end(); ++it)
      if (it->first == tag) {
        w.held_bytes -= it->second;
        w.to_itself.erase(it);
        return;
      }
  }

  // The planner's idealised all-reduce: it may overlap the round's compute
  // from its members' round_start, and their steps wait only for its start.
  void join_allreduce(int r, const PackedAction& a) {
    WorkerState& w = workers_[r];
    ReplicaGroup& g = groups_[w.stage];
    g.ready = g.arrived == 0 ? w.round_start : std::max(g.ready, w.round_start);
    if (++g.arrived < g.size) return;
    const double start = std::max(g.ready, g.channel_free);
    run_allreduce(w.stage, a.key, start, std::max(start + g.allreduce_s, now_), start);
  }

  // The last member is in: the round's all-reduce runs over [start, end];
  // the members waiting at their step go on at `wake_at`.
  void run_allreduce(int stage, int64_t round, double start, double end, double wake_at) {
    ReplicaGroup& g = groups_[stage];
    g.channel_free = end;
    g.round_start = start;
    g.round_end = end;
    g.completed_round = round;
    ++g.rounds_run;
    g.arrived = 0;
    charge_allreduce_cpu(stage);
    if (trace_) trace_->push_back({ActionKind::AllReduce, schedule_.ranks(stage)[0], 0, round, start, end});
    for (int m : g.waiting) wake(m, wake_at);
    g.waiting.clear();
  }

  // What the runtime's AllReduce action does (realistic_latency, or an
  // all-reduce whose bus bandwidth bench-comm measured). Without buckets
  // the round's gradients exist once every replica has ended its
  // backward, so the all-reduce starts when the last one arrives at the
  // action (and its channel is free); with them (gradient_buckets), each
  // bucket starts once every replica's backward has done its layers, as
  // the executor starts them. The action does not block: each replica
  // goes on with its next forward, and its optimizer step waits until the
  // all-reduce ends (step()).
  void start_allreduce(int r, const PackedAction& a) {
    WorkerState& w = workers_[r];
    ReplicaGroup& g = groups_[w.stage];
    if (!g.bucket_s.empty()) note_buckets_ready(w, g);
    if (++g.arrived < g.size) return;
    if (g.bucket_s.empty()) {
      const double start = std::max(now_, g.channel_free);
      run_allreduce(w.stage, a.key, start, start + g.allreduce_s, start + g.allreduce_s);
      return;
    }
    // The buckets one after another on the channel, each from when every
    // replica had it ready (possibly before now: during the backwards).
    double first = 0, end = g.channel_free;
    for (size_t i = 0; i < g.bucket_s.size(); ++i) {
      const double start = std::max(g.bucket_ready[i], end);
      if (i == 0) first = start;
      end = start + g.bucket_s[i];
    }
    run_allreduce(w.stage, a.key, first, end, end);
  }

  // A member at the round's AllReduce action: when its buckets were ready.
  // A whole backward just before it started them as it went (the executor's
  // layer_done); otherwise (zb-h1's W last) the action starts them all.
  void note_buckets_ready(const WorkerState& w, ReplicaGroup& g) {
    for (size_t i = 0; i < g.bucket_s.size(); ++i) {
      const double ready = w.backward_just_done
                               ? w.compute_start + g.bucket_fraction[i] * (w.compute_end - w.compute_start)
                               : now_;
      g.bucket_ready[i] = g.arrived == 0 ? ready : std::max(g.bucket_ready[i], ready);
    }
  }

  // The stage's buckets, if given: each priced as an all-reduce of its
  // bytes, ready at its share of the backward (the profile's share of the
  // layers' backward, scaled by the layers' part of the backward action,
  // which also holds the optimizer step). Returns the all-reduces a round
  // makes.
  size_t set_buckets(ReplicaGroup& g, const PlanStage& st, const std::vector<GradientBucketTiming>* buckets,
                     double backward_action_s, double optimizer_s) {
    if (!buckets || buckets->empty()) return 1;
    const double layers_share = backward_action_s > 0 ? (backward_action_s - optimizer_s) / backward_action_s : 1.0;
    for (const GradientBucketTiming& b : *buckets) {
      if (!(b.ready_fraction > 0 && b.ready_fraction <= 1) || !(b.bytes >= 0))
        throw UserError(cat("stage ", st.index, ": a gradient bucket must be ready within its backward (0 < fraction <= 1) "
                            "and hold bytes >= 0, got ", b.ready_fraction, " and ", b.bytes));
      g.bucket_s.push_back(allreduce_seconds(plan_.topology, st.ranks, b.bytes, shared_cores_));
      g.bucket_fraction.push_back(std::clamp(b.ready_fraction * layers_share, 0.0, 1.0));
    }
    g.bucket_ready.assign(buckets->size(), 0.0);
    return buckets->size();
  }

  // The round's all-reduce is decided: every member's communication thread
  // spends its CPU from now on.
  void charge_allreduce_cpu(int stage) {
    if (!charges_comm_cpu_) return;
    for (int m : schedule_.ranks(stage)) charge_comm_cpu(m, groups_[stage].allreduce_cpu_s);
  }

  bool step(int r, const PackedAction& a) {
    WorkerState& w = workers_[r];
    if (w.replicated) {
      ReplicaGroup& g = groups_[w.stage];
      if (g.completed_round < a.key) {
        g.waiting.push_back(r);
        return false;
      }
      const double usable = g.blocking ? g.round_end : g.round_start;
      if (usable > now_) {
        wake(r, usable);
        return false;
      }
    }
    w.version = a.item;
    if (holds_versions_) count_versions(w);
    if (flush_ && r == mark_rank_)
      for (int i = 0; i < 2; ++i)
        if (a.key == mark_index_[i]) mark(i);
    return true;
  }

  // The planner's idealised all-reduce lets a round's all-reduce start up
  // to a round late (steps wait for its start only), so where it is slower
  // than the round's compute the backlog grows for C / (A - C) rounds
  // before it throttles the replicas: a replay of a few rounds would see
  // the compute's pace. The channel must still run every round's
  // all-reduce, so the steady state is no faster than its occupancy.
  double allreduce_channel_bound() const {
    double bound = 0;
    if (opt_.schedule.minibatches <= 0) return 0;
    for (const ReplicaGroup& g : groups_)
      if (g.size > 1 && !g.blocking)
        bound = std::max(bound, g.allreduce_s * double(g.rounds_run) / double(opt_.schedule.minibatches));
    return bound;
  }

  SimulationReport report() {
    SimulationReport rep;
    rep.schedule = opt_.schedule;
    rep.minibatches = opt_.schedule.minibatches;
    rep.makespan_s = now_;
    double window = mark_time_[1] - mark_time_[0];
    int64_t count = mark_index_[1] - mark_index_[0];
    rep.time_per_minibatch_s = std::max(window / double(count), allreduce_channel_bound());
    if (rep.time_per_minibatch_s > 0)
      rep.throughput_samples_per_s = plan_.profile.batch_size / rep.time_per_minibatch_s;
    if (count > 0) rep.comm_cpu_per_minibatch_s = (comm_cpu_at_mark_[1] - comm_cpu_at_mark_[0]) / double(count);
    for (int r = 0; r < schedule_.workers(); ++r) {
      const WorkerState& w = workers_[r];
      WorkerReport wr;
      wr.rank = r;
      wr.stage = w.stage;
      double busy = window > 0 ? (busy_at_mark_[r][1] - busy_at_mark_[r][0]) / window : 0;
      wr.busy_fraction = std::clamp(busy, 0.0, 1.0);  // rounding can leave 1 + 1e-16
      wr.bubble_fraction = 1.0 - wr.busy_fraction;
      wr.peak_in_flight = w.peak_in_flight;
      wr.peak_held = w.peak_held;
      wr.peak_activation_bytes = w.peak_held_bytes;
      wr.peak_working_bytes = opt_.working_bytes.empty() ? 0 : std::max(w.peak_working_bytes, w.peak_held_bytes);
      wr.peak_weight_versions = w.peak_versions;
      rep.workers.push_back(wr);
    }
    return rep;
  }

  const Plan& plan_;
  const SimulationOptions& opt_;
  Schedule schedule_;
  std::vector<TraceEvent>* trace_;
  bool flush_ = false;
  bool split_ = false;  // zb-h1: B and W
  int chunks_ = 1;      // interleaved-1f1b: stages per worker
  bool holds_versions_ = false;  // 1f1b-rr with stash or vertical: count live weight versions
  // SimulationOptions::cores: the computing workers share the cores.
  bool shared_cores_ = false;
  std::vector<int> computing_ranks_;   // workers computing now
  std::vector<double> work_left_;      // per rank: own-device seconds its computation still needs
  double compute_rate_ = 1.0;          // speed of every computation now (1: own device)
  double progress_time_ = 0;           // when work_left_ was last brought up to date
  // The topology prices the communication threads' CPU (TopologyLevel::comm_cpu_GBps).
  bool charges_comm_cpu_ = false;
  size_t comm_threads_busy_ = 0;       // communication threads in computing_ranks_
  std::vector<StageCost> costs_;
  std::vector<ReplicaGroup> groups_;
  std::vector<WorkerState> workers_;
  std::vector<std::array<double, 2>> busy_at_mark_;  // per rank: busy seconds at the two marks
  std::vector<std::vector<Message>> spilled_;        // per rank: messages beyond its mailbox's inline ones
  std::vector<double> link_free_;  // per downstream rank of a stage boundary
  // Lists given instead of the generator's (a schedule file), per rank: the
  // index of the next action and the versions of its forwards in order.
  const std::vector<std::vector<Action>>* given_ = nullptr;
  std::vector<size_t> given_next_;
  std::vector<std::vector<int64_t>> given_forward_versions_;
  EventQueue events_;
  double now_ = 0;
  int64_t mark_index_[2] = {-1, 0};
  double mark_time_[2] = {0, 0};
  // The communication threads' CPU charged so far, and at the two marks
  // (charged when a message or all-reduce starts: the window counts the
  // ones that start inside it).
  double comm_cpu_charged_s_ = 0;
  double comm_cpu_at_mark_[2] = {0, 0};
  int mark_rank_ = 0;
};

}  // namespace

int64_t replica_period(const std::vector<int>& replicas) {
  int64_t period = 1;
  for (int r : replicas) {
    period = std::lcm(period, int64_t(std::max(r, 1)));
    if (period > kMaxReplicaPeriod) return kMaxReplicaPeriod + 1;
  }
  return period;
}

bool waits_for_runtime_allreduce(const Plan& plan, const PlanStage& stage, const SimulationOptions& options) {
  return stage.replicas > 1 && (options.realistic_latency || plan.topology.group_allreduce_GBps(stage.ranks) > 0);
}

SimulationReport simulate(const Plan& plan, const SimulationOptions& options, std::vector<TraceEvent>* trace) {
  Simulation sim(plan, options, trace);
  return sim.run();
}

}  // namespace pd
