#include "runtime/schedule/check.h"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"

namespace pd {
namespace {

struct Reporter {
  std::vector<std::string> messages;
  size_t max;
  bool full() const { return messages.size() >= max; }
  void add(std::string m) {
    if (!full()) messages.push_back(std::move(m));
  }
};

std::string where(int rank, size_t index, const Action& a, bool flush) {
  return cat("rank ", rank, " action ", index, " ", format_action(a, flush), ": ");
}

bool is_gradient(ActionKind k) { return k == ActionKind::SendGradient || k == ActionKind::RecvGradient; }

// The stage an action of rank r runs on (its chunk's, for interleaved-1f1b).
int stage_of_action(const Schedule& sch, int r, const Action& a) { return sch.stage_of(r, a.chunk); }

// The downstream stage of the boundary a message crosses: interleaved
// workers exchange messages of several boundaries, each its own channel.
int boundary_of(const Schedule& sch, int r, const Action& a) {
  const int s = stage_of_action(sch, r, a);
  const bool below = a.kind == ActionKind::SendActivation || a.kind == ActionKind::RecvGradient;
  return below ? s + 1 : s;
}

// (sender, receiver, direction, boundary) -> tags in list order, sends and receives.
using ChannelKey = std::tuple<int, int, bool, int>;
struct ChannelTags {
  std::vector<int64_t> sent, received;
};

void check_messages(const Schedule& sch, const std::vector<std::vector<Action>>& lists, Reporter& rep) {
  const bool flush = is_flush(sch.options().kind);
  std::map<ChannelKey, ChannelTags> channels;
  for (int r = 0; r < static_cast<int>(lists.size()); ++r) {
    for (size_t i = 0; i < lists[r].size(); ++i) {
      const Action& a = lists[r][i];
      if (a.chunk < 0 || a.chunk >= sch.chunks()) {
        rep.add(where(r, i, a, flush) + cat("chunk ", a.chunk, " is outside 0..", sch.chunks() - 1));
        continue;
      }
      if (!a.is_send() && !a.is_recv()) continue;
      const int s = stage_of_action(sch, r, a);
      // A message to itself is right only where the neighbouring stage is
      // one of its own chunks (a V's turn): the check below says so.
      if (a.peer < 0 || a.peer >= sch.workers()) {
        rep.add(where(r, i, a, flush) + cat("peer ", a.peer, " is not a rank"));
        continue;
      }
      const bool downstream = a.kind == ActionKind::SendActivation || a.kind == ActionKind::RecvGradient;
      const int want = downstream ? s + 1 : s - 1;
      if (want < 0 || want >= sch.stages() || !sch.runs(a.peer, want))
        rep.add(where(r, i, a, flush) + cat("peer rank ", a.peer, " does not run stage ", want,
                                            " (the neighbour of stage ", s, " it needs)"));
      const bool grad = is_gradient(a.kind);
      const int boundary = boundary_of(sch, r, a);
      if (a.is_send())
        channels[{r, a.peer, grad, boundary}].sent.push_back(a.tag);
      else
        channels[{a.peer, r, grad, boundary}].received.push_back(a.tag);
    }
  }
  for (const auto& [key, tags] : channels) {
    const auto& [src, dst, grad, boundary] = key;
    const char* what = grad ? "gradient" : "activation";
    size_t n = std::min(tags.sent.size(), tags.received.size());
    for (size_t k = 0; k < n; ++k) {
      if (tags.sent[k] != tags.received[k]) {
        rep.add(cat(what, " messages ", src, " -> ", dst, ": message ", k, " is sent with tag ", tags.sent[k],
                    " but received as tag ", tags.received[k]));
        break;
      }
    }
    if (tags.sent.size() > n)
      rep.add(cat(what, " message ", src, " -> ", dst, " tag ", tags.sent[n], " is sent but never received"));
    if (tags.received.size() > n)
      rep.add(cat(what, " message ", src, " -> ", dst, " tag ", tags.received[n], " is received but never sent"));
  }
}

// Per worker: data before use, F then B once, in-flight bound, versions.
void check_worker(const Schedule& sch, int r, const std::vector<Action>& list,
                  const std::unordered_map<int64_t, int64_t>& input_versions, Reporter& rep) {
  const auto& opt = sch.options();
  const bool flush = is_flush(opt.kind);
  const bool split = splits_backward(opt.kind);
  const int last = sch.stages() - 1;
  const int64_t limit = sch.in_flight_limit(r), held_limit = sch.held_limit(r);
  auto key = [&](const Action& a) {
    return (a.minibatch * opt.microbatches + a.microbatch) * sch.chunks() + a.chunk;
  };
  std::unordered_map<int64_t, int> activations, gradients;  // received, not yet used
  std::unordered_map<int64_t, int64_t> in_flight;           // item -> F's version
  std::unordered_map<int64_t, int64_t> awaiting_w;          // split: B done, W not yet: item -> version
  std::unordered_set<int64_t> forwarded, backwarded;          // items whose tensors exist to be sent
  std::vector<int64_t> created{0};                          // versions this worker had
  int64_t version = 0, rounds = 0;
  for (size_t i = 0; i < list.size() && !rep.full(); ++i) {
    const Action& a = list[i];
    auto bad = [&](const std::string& m) { rep.add(where(r, i, a, flush) + m); };
    if (a.chunk < 0 || a.chunk >= sch.chunks()) continue;  // reported by check_messages
    const int s = stage_of_action(sch, r, a);
    switch (a.kind) {
      case ActionKind::RecvActivation: ++activations[key(a)]; break;
      case ActionKind::RecvGradient: ++gradients[key(a)]; break;
      case ActionKind::SendActivation:
        if (!forwarded.count(key(a))) bad("sends an activation before its forward made it");
        break;
      case ActionKind::SendGradient:
        if (!backwarded.count(key(a))) bad("sends a gradient before its backward made it");
        break;
      case ActionKind::Forward: {
        forwarded.insert(key(a));
        if (s > 0 && activations[key(a)]-- <= 0) bad("runs before its activation is received");
        if (in_flight.count(key(a))) bad("runs twice without a backward");
        in_flight[key(a)] = a.weight_version;
        if (static_cast<int64_t>(in_flight.size()) > limit)
          bad(cat(in_flight.size(), " minibatches in flight, more than the limit ", limit));
        if (split && static_cast<int64_t>(in_flight.size() + awaiting_w.size()) > held_limit)
          bad(cat(in_flight.size() + awaiting_w.size(), " microbatches between F and W, more than the limit ",
                  held_limit));
        if (opt.kind->never_drains()) {
          const int64_t want = opt.kind->batch_version(a.minibatch);
          if (a.weight_version != want)
            bad(cat(opt.kind->name(), " runs batch ", a.minibatch, " on version ", want, ", not ", a.weight_version));
          if (a.weight_version > version) bad(cat("uses version ", a.weight_version, " not created yet"));
        } else if (flush || opt.policy != WeightPolicy::Vertical) {
          if (a.weight_version != version) bad(cat("uses version ", a.weight_version, ", newest is ", version));
          if (flush && a.weight_version != a.minibatch) bad("a flush batch must use the version equal to its index");
        } else {
          auto v = input_versions.find(a.minibatch);
          if (v == input_versions.end()) {
            bad("stage 0 never runs this minibatch forward");
            break;
          }
          auto newest = std::upper_bound(created.begin(), created.end(), v->second);
          int64_t want = *(newest - 1);
          if (a.weight_version != want)
            bad(cat("vertical sync needs version ", want, " (newest <= v(m) = ", v->second, "), uses ",
                    a.weight_version));
        }
        break;
      }
      case ActionKind::Backward: {
        backwarded.insert(key(a));
        if (s < last && gradients[key(a)]-- <= 0) bad("runs before its gradient is received");
        auto f = in_flight.find(key(a));
        if (f == in_flight.end()) {
          bad("has no forward before it");
          break;
        }
        const bool newest = !flush && opt.policy == WeightPolicy::None;
        int64_t want = newest ? version : f->second;
        if (a.weight_version != want)
          bad(cat("uses version ", a.weight_version, ", the policy requires ", want));
        if (a.weight_version > version) bad(cat("uses version ", a.weight_version, " not created yet"));
        if (split) awaiting_w[key(a)] = f->second;
        in_flight.erase(f);
        break;
      }
      case ActionKind::BackwardWeight: {
        if (!split) {
          bad(cat(to_string(opt.kind), " does not split the backward: W has no place in it"));
          break;
        }
        auto w = awaiting_w.find(key(a));
        if (w == awaiting_w.end()) {
          bad("has no B before it (or runs twice)");
          break;
        }
        if (a.weight_version != w->second) bad(cat("uses version ", a.weight_version, ", its B used ", w->second));
        awaiting_w.erase(w);
        break;
      }
      case ActionKind::OptimizerStep: {
        if (a.round != rounds) bad(cat("round ", a.round, " follows ", rounds - 1));
        // A flush step absorbs the whole batch: every gradient must be in
        // (2bw: of this batch; the next one's may be in flight).
        if (flush) {
          const int64_t per_batch = int64_t{opt.microbatches} * sch.chunks();
          auto of_batch = [&](const auto& items) {
            int64_t n = 0;
            for (const auto& [item, v] : items) n += item / per_batch <= a.round ? 1 : 0;
            return n;
          };
          const int64_t b = of_batch(in_flight), w = of_batch(awaiting_w);
          if (b > 0 || w > 0)
            bad(cat("steps with ", b, " backwards and ", w, " weight gradients of the batch still to run"));
        }
        int64_t want = version + (flush ? 1 : a.gradient_count);
        if (a.version_created != want) bad(cat("creates version ", a.version_created, ", expected ", want));
        version = a.version_created;
        created.push_back(version);
        ++rounds;
        break;
      }
      default: break;
    }
  }
  if (!in_flight.empty() && !rep.full())
    rep.add(cat("rank ", r, ": ", in_flight.size(), " minibatches run forward but never backward"));
  if (!awaiting_w.empty() && !rep.full())
    rep.add(cat("rank ", r, ": ", awaiting_w.size(), " microbatches run B but never W"));
  if (rounds != sch.rounds(sch.stage_of(r)) && !rep.full())
    rep.add(cat("rank ", r, ": ", rounds, " optimizer steps, expected ", sch.rounds(sch.stage_of(r))));
}

// Every stage runs every item forward and backward exactly once.
void check_coverage(const Schedule& sch, const std::vector<std::vector<Action>>& lists, Reporter& rep) {
  const auto& opt = sch.options();
  const int64_t items = opt.minibatches * opt.microbatches;
  const int want_w = splits_backward(opt.kind) ? 1 : 0;
  for (int s = 0; s < sch.stages() && !rep.full(); ++s) {
    std::vector<uint8_t> f(items, 0), b(items, 0), w(items, 0);
    for (int r : sch.ranks(s))
      for (const Action& a : lists[r]) {
        if (!a.is_compute() || stage_of_action(sch, r, a) != s) continue;
        int64_t k = a.minibatch * opt.microbatches + a.microbatch;
        if (k < 0 || k >= items || a.microbatch < 0 || a.microbatch >= opt.microbatches) {
          rep.add(cat("rank ", r, ": ", format_action(a, is_flush(opt.kind)), " is outside the run"));
          continue;
        }
        ++(a.kind == ActionKind::Forward ? f : a.kind == ActionKind::Backward ? b : w)[k];
      }
    for (int64_t k = 0; k < items && !rep.full(); ++k)
      if (f[k] != 1 || b[k] != 1 || w[k] != want_w)
        rep.add(want_w ? cat("stage ", s, ": item ", k, " runs forward ", int(f[k]), ", backward (B) ", int(b[k]),
                             " and weight gradient (W) ", int(w[k]), " times, expected once each")
                       : cat("stage ", s, ": item ", k, " runs forward ", int(f[k]), " and backward ", int(b[k]),
                             " times, expected once each", w[k] ? cat(" (and W ", int(w[k]),
                             " times: this schedule does not split the backward)") : std::string()));
  }
}

// Executes the lists with zero durations: a receive waits for its send, an
// AllReduce for every replica of its stage. Anything left blocked is a
// cycle in the dependency graph (a deadlock).
void check_deadlock(const Schedule& sch, const std::vector<std::vector<Action>>& lists, Reporter& rep) {
  const int R = sch.workers();
  std::vector<size_t> pos(R, 0);
  std::map<ChannelKey, int64_t> posted;  // sends posted so far per channel
  std::map<ChannelKey, int64_t> taken;   // receives done so far per channel
  std::map<ChannelKey, int> waiting;     // rank blocked on the channel
  struct Round {
    int arrived = 0;
    int64_t local_sum = 0, count = -1;
    std::vector<int> members;
  };
  std::vector<std::map<int64_t, Round>> rounds(sch.stages());
  std::deque<int> ready;
  for (int r = 0; r < R; ++r) ready.push_back(r);
  while (!ready.empty()) {
    int r = ready.front();
    ready.pop_front();
    const auto& list = lists[r];
    while (pos[r] < list.size()) {
      const Action& a = list[pos[r]];
      if (a.is_send()) {
        ChannelKey k{r, a.peer, is_gradient(a.kind), boundary_of(sch, r, a)};
        ++posted[k];
        auto w = waiting.find(k);
        if (w != waiting.end()) {
          ready.push_back(w->second);
          waiting.erase(w);
        }
      } else if (a.is_recv()) {
        ChannelKey k{a.peer, r, is_gradient(a.kind), boundary_of(sch, r, a)};
        if (posted[k] <= taken[k]) {
          waiting[k] = r;
          break;
        }
        ++taken[k];
      } else if (a.kind == ActionKind::AllReduce) {
        // Starting the all-reduce never blocks; the round's step waits for
        // every replica to have started it.
        int s = sch.stage_of(r);
        Round& round = rounds[s][a.round];
        if (round.count >= 0 && round.count != a.gradient_count)
          rep.add(cat("stage ", s, " round ", a.round, ": replicas disagree on the gradient count (",
                      round.count, " vs ", a.gradient_count, ")"));
        round.count = a.gradient_count;
        round.local_sum += a.local_gradients;
        if (++round.arrived == sch.replicas(s)) {
          if (round.local_sum != round.count)
            rep.add(cat("stage ", s, " round ", a.round, ": local gradients add up to ", round.local_sum,
                        ", the round claims ", round.count));
          for (int m : round.members) ready.push_back(m);
          round.members.clear();
        }
      } else if (a.kind == ActionKind::OptimizerStep && sch.replicas(sch.stage_of(r)) > 1) {
        Round& round = rounds[sch.stage_of(r)][a.round];
        if (round.arrived < sch.replicas(sch.stage_of(r))) {
          round.members.push_back(r);  // woken when the last replica starts the round
          break;
        }
      }
      ++pos[r];
    }
  }
  int stuck = 0;
  for (int r = 0; r < R && !rep.full(); ++r)
    if (pos[r] < lists[r].size()) {
      ++stuck;
      rep.add(cat("deadlock: rank ", r, " blocks forever at action ", pos[r], " ",
                  format_action(lists[r][pos[r]], is_flush(sch.options().kind))));
    }
  (void)stuck;
}

}  // namespace

std::vector<std::string> check_schedule(const Schedule& sch, const std::vector<std::vector<Action>>& lists,
                                        size_t max_reports) {
  Reporter rep{{}, max_reports};
  if (static_cast<int>(lists.size()) != sch.workers()) {
    rep.add(cat("there are ", lists.size(), " action lists for ", sch.workers(), " workers"));
    return rep.messages;
  }
  check_messages(sch, lists, rep);
  check_coverage(sch, lists, rep);
  std::unordered_map<int64_t, int64_t> input_versions;  // vertical: v(m) from stage 0's forwards
  for (int r : sch.ranks(0))
    for (const Action& a : lists[r])
      if (a.kind == ActionKind::Forward && a.chunk == 0) input_versions[a.minibatch] = a.weight_version;
  for (int r = 0; r < sch.workers(); ++r) check_worker(sch, r, lists[r], input_versions, rep);
  if (rep.messages.empty()) check_deadlock(sch, lists, rep);  // needs consistent messages
  return rep.messages;
}

std::vector<std::string> check_schedule(const Schedule& schedule, size_t max_reports) {
  std::vector<std::vector<Action>> lists(schedule.workers());
  for (int r = 0; r < schedule.workers(); ++r) lists[r] = schedule.actions(r);
  return check_schedule(schedule, lists, max_reports);
}

void require_valid_schedule(const Schedule& schedule, const std::vector<std::vector<Action>>& lists) {
  auto v = check_schedule(schedule, lists);
  if (v.empty()) return;
  std::string msg = cat("the ", to_string(schedule.options().kind), " schedule is invalid (", v.size(),
                        v.size() >= 20 ? "+" : "", " violations):");
  for (const auto& m : v) msg += "\n  " + m;
  throw RuntimeFailure(msg);
}

}  // namespace pd
