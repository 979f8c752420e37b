#include "runtime/simulator/simulator.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "core/error.h"

namespace pd {
namespace {

struct Message {
  int64_t tag;
  double arrival;
};

// Messages that arrived and were not yet received. Usually one or two (a
// pipeline neighbour is rarely far ahead), kept inline so that a send and
// its receive touch only the worker's own cache lines.
class Inbox {
 public:
  size_t size() const { return inline_count_ + spill_.size(); }
  Message& operator[](size_t i) { return i < kInline ? inline_[i] : spill_[i - kInline]; }
  void push_back(const Message& m) {
    if (inline_count_ < kInline && spill_.empty()) inline_[inline_count_++] = m;
    else spill_.push_back(m);
  }
  void erase_unordered(size_t i) {
    Message& last = (*this)[size() - 1];
    (*this)[i] = last;
    if (!spill_.empty()) spill_.pop_back();
    else --inline_count_;
  }

 private:
  static constexpr size_t kInline = 3;
  Message inline_[kInline];
  size_t inline_count_ = 0;
  std::vector<Message> spill_;  // only while inline_ is full
};

struct PeerTransfer {
  int peer = -1;
  double seconds = 0;  // one message's time on the link
};

// Hot fields first, the cursor last (its action buffer is large).
struct WorkerState {
  const Action* action = nullptr;  // the current one, in the cursor's buffer
  int stage = 0;
  bool replicated = false;           // the stage has more than one replica
  double forward_s = 0, backward_s = 0;  // the stage's, copied: read at every compute
  bool computing = false;
  double compute_start = 0, compute_end = 0;
  double busy = 0;
  double round_start = 0;   // start of the compute an all-reduce may overlap
  int64_t wait_tag = -1;    // blocked on this message
  Inbox inbox;
  int64_t in_flight = 0, peak_in_flight = 0;
  // Weight versions the in-flight minibatches use: their forwards' versions
  // never decrease, so counting distinct ones needs only the newest and,
  // when the oldest leaves, the version of the next one (from the cursor) -
  // no per-minibatch storage, which for long pipelines would be read back
  // from main memory a thousand minibatches after it was written.
  int64_t distinct_held = 0, newest_held = -1, backwards_done = 0;
  int64_t version = 0, peak_versions = 1;
  double busy_at_mark[2] = {0, 0};
  PeerTransfer peer_transfer[2];  // [0] upstream (gradients), [1] downstream (activations)
  ActionCursor cursor;
};

struct ReplicaGroup {
  int size = 1;
  int arrived = 0;
  double ready = 0;
  double channel_free = 0;
  int64_t completed_round = -1;
  double round_start = 0, round_end = 0;
  double allreduce_s = 0;
  std::vector<int> waiting;  // ranks blocked at the OptimizerStep
};

// Pending (time, rank) events: a 4-ary min-heap, plus a list for events at
// the current time (most wake-ups: a message that is already usable), which
// skip the heap. At most one event per worker is pending (a worker has one
// only while it computes or waits for a known time), so the heap stays
// small. A pop is a chain of dependent loads down the tree; four children
// per node halve its depth against a binary heap, and the earliest of them
// is selected without branches (which child is earlier is a coin flip).
// Events at the same future time pop in rank order; wake-ups for the current
// time in the order they were made. (A calendar queue was tried: workers moving in lockstep
// put many events into one slot, and it lost to this heap.)
class EventQueue {
 public:
  struct Event {
    double time;
    int rank;
  };
  void push(Event e, double now) {
    if (e.time <= now) {
      now_.push_back(e.rank);
      return;
    }
    size_t i = size_++;
    if (heap_.size() < i + 8) heap_.resize(2 * i + 8, kEmpty);
    while (i > 0) {
      size_t parent = (i - 1) / 4;
      if (!earlier(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  // The next event (time `now` for the current-time list); false when none.
  bool pop(Event& out, double now) {
    if (next_now_ < now_.size()) {
      out = {now, now_[next_now_++]};
      return true;
    }
    now_.clear();
    next_now_ = 0;
    if (size_ == 0) return false;
    out = heap_[0];
    // Sink the hole at the root to a leaf (empty slots read as never), then
    // lift the last event into it.
    const size_t last_slot = --size_;
    const Event last = heap_[last_slot];
    heap_[last_slot] = kEmpty;
    size_t i = 0;
    for (size_t c = 1; c < last_slot; c = 4 * i + 1) {
      size_t a = c + earlier(heap_[c + 1], heap_[c]);
      size_t b = c + 2 + earlier(heap_[c + 3], heap_[c + 2]);
      size_t m = earlier(heap_[b], heap_[a]) ? b : a;
      heap_[i] = heap_[m];
      i = m;
    }
    while (i > 0) {
      size_t parent = (i - 1) / 4;
      if (!earlier(last, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = size_ > 0 ? last : kEmpty;
    return true;
  }

 private:
  static constexpr Event kEmpty{std::numeric_limits<double>::infinity(), std::numeric_limits<int>::max()};
  // Equal times: the lower rank first, whatever the order of pushes.
  static bool earlier(const Event& a, const Event& b) {
    return (a.time < b.time) | ((a.time == b.time) & (a.rank < b.rank));  // no branches
  }
  std::vector<Event> heap_;  // children of i: 4i+1 .. 4i+4; slots past the last hold kEmpty
  size_t size_ = 0;
  std::vector<int> now_;
  size_t next_now_ = 0;
};

struct StageCost {
  double forward_s, backward_s;
  double message_bytes;
  uint64_t stashed_bytes;
};

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
    if (!opt.stashed_bytes.empty() && opt.stashed_bytes.size() != plan.stages.size())
      throw UserError(cat("stashed bytes are given for ", opt.stashed_bytes.size(), " stages, the plan has ",
                          plan.stages.size()));
    flush_ = is_flush(opt.schedule.kind);
    holds_versions_ = !flush_ && opt.schedule.policy != WeightPolicy::None;
    const double items = opt.schedule.microbatches;
    for (size_t s = 0; s < plan.stages.size(); ++s) {
      const PlanStage& st = plan.stages[s];
      uint64_t stash = opt.stashed_bytes.empty() ? st.output_bytes : opt.stashed_bytes[s];
      costs_.push_back({st.forward_s / items, st.backward_s / items, double(st.output_bytes) / items,
                        static_cast<uint64_t>(std::llround(double(stash) / items))});
      ReplicaGroup g;
      g.size = st.replicas;
      if (st.replicas > 1) {
        double r = st.replicas;
        double bw = plan.topology.group_bandwidth(st.ranks) * 1e9;
        g.allreduce_s = 4.0 * (r - 1) / r * double(st.parameter_bytes) / bw;
      }
      groups_.push_back(g);
    }
    workers_.resize(R);
    for (int r = 0; r < R; ++r) {
      workers_[r].cursor = schedule_.cursor(r);
      workers_[r].stage = schedule_.stage_of(r);
      workers_[r].replicated = groups_[workers_[r].stage].size > 1;
      workers_[r].forward_s = costs_[workers_[r].stage].forward_s;
      workers_[r].backward_s = costs_[workers_[r].stage].backward_s;
    }
    link_free_.assign(R, 0.0);
    choose_marks();
  }

  SimulationReport run() {
    for (int r = 0; r < schedule_.workers(); ++r) events_.push({0.0, r}, now_);
    EventQueue::Event e;
    while (events_.pop(e, now_)) {
      now_ = e.time;
      advance(e.rank);
    }
    for (int r = 0; r < schedule_.workers(); ++r)
      if (workers_[r].action || workers_[r].computing)
        throw std::logic_error(cat("simulator: rank ", r, " is blocked at ",
                                   format_action(*workers_[r].action, flush_), " (the schedule deadlocks)"));
    return report();
  }

 private:

  void choose_marks() {
    const int64_t K = opt_.schedule.minibatches;
    const int64_t step = flush_ ? 1 : schedule_.replicas(0);  // same replica: periodic
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
    for (auto& w : workers_) {
      double partial = w.computing ? std::max(0.0, std::min(now_, w.compute_end) - w.compute_start) : 0.0;
      w.busy_at_mark[which] = w.busy + partial;
    }
  }

  void wake(int rank, double t) { events_.push({t, rank}, now_); }

  void advance(int r) {
    WorkerState& w = workers_[r];
    if (w.computing) finish_compute(r);
    for (;;) {
      if (!w.action && !(w.action = w.cursor.next())) return;
      const Action& a = *w.action;
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
        if (!receive(r, a.tag)) return;
      } else if (a.kind == ActionKind::OptimizerStep) {
        if (!step(r, a)) return;
      } else {
        join_allreduce(r, a);
      }
      w.action = nullptr;
    }
  }

  void start_compute(int r) {
    WorkerState& w = workers_[r];
    const Action& a = *w.action;
    const bool fwd = a.kind == ActionKind::Forward;
    w.computing = true;
    w.compute_start = now_;
    w.compute_end = now_ + (fwd ? w.forward_s : w.backward_s);
    if (fwd == !flush_) w.round_start = now_;
    if (fwd) {
      if (holds_versions_) {
        if (w.in_flight == 0 || a.weight_version != w.newest_held) ++w.distinct_held;
        w.newest_held = a.weight_version;
      }
      w.peak_in_flight = std::max(w.peak_in_flight, ++w.in_flight);
      if (holds_versions_) count_versions(w);
    }
    events_.push({w.compute_end, r}, now_);
  }

  void finish_compute(int r) {
    WorkerState& w = workers_[r];
    const Action& a = *w.action;
    w.computing = false;
    w.busy += w.compute_end - w.compute_start;
    if (trace_) trace_->push_back({a.kind, r, a.microbatch, a.minibatch, w.compute_start, w.compute_end});
    if (a.kind == ActionKind::Backward) {
      --w.in_flight;
      if (holds_versions_) {
        const int64_t next = ++w.backwards_done;
        if (w.in_flight == 0 || w.cursor.forward_version(next) != a.weight_version) --w.distinct_held;
      }
      if (!flush_ && w.stage == 0)
        for (int i = 0; i < 2; ++i)
          if (a.minibatch == mark_index_[i]) mark(i);
    }
    w.action = nullptr;
  }

  // Seconds one message from the worker to `peer` occupies the link. An
  // activation has the size of the sender's output, a gradient that of the
  // receiver's (the previous stage's). Most peers repeat (always, between
  // unreplicated stages), so each worker remembers the last one per
  // direction instead of asking the topology for every message.
  double transfer_seconds(WorkerState& w, bool downstream, int peer) {
    PeerTransfer& c = w.peer_transfer[downstream ? 1 : 0];
    if (c.peer != peer) {
      double bytes = costs_[downstream ? w.stage : w.stage - 1].message_bytes;
      c = {peer, bytes / (plan_.topology.bandwidth_between(static_cast<int>(&w - workers_.data()), peer) * 1e9)};
    }
    return c.seconds;
  }


  void count_versions(WorkerState& w) {
    int64_t n = w.distinct_held;
    if (n == 0 || w.newest_held != w.version) ++n;
    w.peak_versions = std::max(w.peak_versions, n);
  }

  void send(int r, const Action& a) {
    const bool activation = a.kind == ActionKind::SendActivation;
    const int downstream = activation ? a.peer : r;
    const double duration = transfer_seconds(workers_[r], activation, a.peer);
    const double start = std::max(now_, link_free_[downstream]);
    const double end = start + duration;
    link_free_[downstream] = end;
    // Idealised: the link is a throughput limit only. A message is usable
    // at once unless the link's backlog ahead of it exceeds one transfer
    // (the other direction's message of the same minibatch), so the link's
    // busy time still bounds throughput at 2 C per minibatch but an
    // activation never waits behind a gradient.
    const double arrival = opt_.realistic_latency ? end : std::max(now_, start - duration);
    WorkerState& dst = workers_[a.peer];
    dst.inbox.push_back({a.tag, arrival});
    if (dst.wait_tag == a.tag) {
      dst.wait_tag = -1;
      wake(a.peer, arrival);
    }
  }

  // True when the message is here; otherwise the worker waits for it.
  bool receive(int r, int64_t tag) {
    WorkerState& w = workers_[r];
    for (size_t i = 0; i < w.inbox.size(); ++i) {
      if (w.inbox[i].tag != tag) continue;
      if (w.inbox[i].arrival > now_) {
        wake(r, w.inbox[i].arrival);
        return false;
      }
      w.inbox.erase_unordered(i);
      return true;
    }
    w.wait_tag = tag;
    return false;
  }

  void join_allreduce(int r, const Action& a) {
    WorkerState& w = workers_[r];
    ReplicaGroup& g = groups_[w.stage];
    g.ready = g.arrived == 0 ? w.round_start : std::max(g.ready, w.round_start);
    if (++g.arrived < g.size) return;
    double start = std::max(g.ready, g.channel_free);
    double end = std::max(start + g.allreduce_s, now_);
    g.channel_free = end;
    g.round_end = end;
    g.round_start = start;
    g.completed_round = a.round;
    g.arrived = 0;
    if (trace_) trace_->push_back({ActionKind::AllReduce, schedule_.ranks(w.stage)[0], 0, a.round, start, end});
    for (int m : g.waiting) wake(m, opt_.realistic_latency ? end : start);
    g.waiting.clear();
  }

  bool step(int r, const Action& a) {
    WorkerState& w = workers_[r];
    if (w.replicated) {
      ReplicaGroup& g = groups_[w.stage];
      if (g.completed_round < a.round) {
        g.waiting.push_back(r);
        return false;
      }
      const double usable = opt_.realistic_latency ? g.round_end : g.round_start;
      if (usable > now_) {
        wake(r, usable);
        return false;
      }
    }
    w.version = a.version_created;
    if (holds_versions_) count_versions(w);
    if (flush_ && r == mark_rank_)
      for (int i = 0; i < 2; ++i)
        if (a.round == mark_index_[i]) mark(i);
    return true;
  }

  SimulationReport report() {
    SimulationReport rep;
    rep.schedule = to_string(opt_.schedule.kind);
    rep.minibatches = opt_.schedule.minibatches;
    rep.makespan_s = now_;
    double window = mark_time_[1] - mark_time_[0];
    int64_t count = mark_index_[1] - mark_index_[0];
    rep.time_per_minibatch_s = window / double(count);
    if (rep.time_per_minibatch_s > 0)
      rep.throughput_samples_per_s = plan_.profile.batch_size / rep.time_per_minibatch_s;
    for (int r = 0; r < schedule_.workers(); ++r) {
      const WorkerState& w = workers_[r];
      WorkerReport wr;
      wr.rank = r;
      wr.stage = w.stage;
      double busy = window > 0 ? (w.busy_at_mark[1] - w.busy_at_mark[0]) / window : 0;
      wr.busy_fraction = std::clamp(busy, 0.0, 1.0);  // rounding can leave 1 + 1e-16
      wr.bubble_fraction = 1.0 - wr.busy_fraction;
      wr.peak_in_flight = w.peak_in_flight;
      wr.peak_activation_bytes = static_cast<uint64_t>(w.peak_in_flight) * costs_[w.stage].stashed_bytes;
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
  bool holds_versions_ = false;  // 1f1b-rr with stash or vertical: count live weight versions
  std::vector<StageCost> costs_;
  std::vector<ReplicaGroup> groups_;
  std::vector<WorkerState> workers_;
  std::vector<double> link_free_;  // per downstream rank of a stage boundary
  EventQueue events_;
  double now_ = 0;
  int64_t mark_index_[2] = {-1, 0};
  double mark_time_[2] = {0, 0};
  int mark_rank_ = 0;
};

}  // namespace

SimulationReport simulate(const Plan& plan, const SimulationOptions& options, std::vector<TraceEvent>* trace) {
  Simulation sim(plan, options, trace);
  return sim.run();
}

}  // namespace pd
