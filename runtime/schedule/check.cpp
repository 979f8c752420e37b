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

// (sender, receiver, direction) -> tags in list order, sends and receives.
using ChannelKey = std::tuple<int, int, bool>;
struct ChannelTags {
  std::vector<int64_t> sent, received;
};

void check_messages(const Schedule& sch, const std::vector<std::vector<Action>>& lists, Reporter& rep) {
  const bool flush = is_flush(sch.options().kind);
  std::map<ChannelKey, ChannelTags> channels;
  for (int r = 0; r < static_cast<int>(lists.size()); ++r) {
    const int s = sch.stage_of(r);
    for (size_t i = 0; i < lists[r].size(); ++i) {
      const Action& a = lists[r][i];
      if (!a.is_send() && !a.is_recv()) continue;
      if (a.peer == r) {
        rep.add(where(r, i, a, flush) + "waits on itself");
        continue;
      }
      if (a.peer < 0 || a.peer >= sch.workers()) {
        rep.add(where(r, i, a, flush) + cat("peer ", a.peer, " is not a rank"));
        continue;
      }
      const bool downstream = a.kind == ActionKind::SendActivation || a.kind == ActionKind::RecvGradient;
      const int want = downstream ? s + 1 : s - 1;
      if (sch.stage_of(a.peer) != want)
        rep.add(where(r, i, a, flush) + cat("peer rank ", a.peer, " is in stage ", sch.stage_of(a.peer),
                                            ", expected stage ", want));
      const bool grad = is_gradient(a.kind);
      if (a.is_send())
        channels[{r, a.peer, grad}].sent.push_back(a.tag);
      else
        channels[{a.peer, r, grad}].received.push_back(a.tag);
    }
  }
  for (const auto& [key, tags] : channels) {
    const auto& [src, dst, grad] = key;
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
  const int s = sch.stage_of(r);
  const int last = sch.stages() - 1;
  const int64_t limit = sch.in_flight_limit(r);
  auto key = [&](const Action& a) { return a.minibatch * opt.microbatches + a.microbatch; };
  std::unordered_map<int64_t, int> activations, gradients;  // received, not yet used
  std::unordered_map<int64_t, int64_t> in_flight;           // item -> F's version
  std::unordered_set<int64_t> forwarded, backwarded;          // items whose tensors exist to be sent
  std::vector<int64_t> created{0};                          // versions this worker had
  int64_t version = 0, rounds = 0;
  for (size_t i = 0; i < list.size() && !rep.full(); ++i) {
    const Action& a = list[i];
    auto bad = [&](const std::string& m) { rep.add(where(r, i, a, flush) + m); };
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
        if (flush || opt.policy != WeightPolicy::Vertical) {
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
        in_flight.erase(f);
        break;
      }
      case ActionKind::OptimizerStep: {
        if (a.round != rounds) bad(cat("round ", a.round, " follows ", rounds - 1));
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
  if (rounds != sch.rounds(s) && !rep.full())
    rep.add(cat("rank ", r, ": ", rounds, " optimizer steps, expected ", sch.rounds(s)));
}

// Every stage runs every item forward and backward exactly once.
void check_coverage(const Schedule& sch, const std::vector<std::vector<Action>>& lists, Reporter& rep) {
  const auto& opt = sch.options();
  const int64_t items = opt.minibatches * opt.microbatches;
  for (int s = 0; s < sch.stages() && !rep.full(); ++s) {
    std::vector<uint8_t> f(items, 0), b(items, 0);
    for (int r : sch.ranks(s))
      for (const Action& a : lists[r]) {
        if (!a.is_compute()) continue;
        int64_t k = a.minibatch * opt.microbatches + a.microbatch;
        if (k < 0 || k >= items) {
          rep.add(cat("rank ", r, ": ", format_action(a, is_flush(opt.kind)), " is outside the run"));
          continue;
        }
        ++(a.kind == ActionKind::Forward ? f : b)[k];
      }
    for (int64_t k = 0; k < items && !rep.full(); ++k)
      if (f[k] != 1 || b[k] != 1)
        rep.add(cat("stage ", s, ": item ", k, " runs forward ", int(f[k]), " and backward ", int(b[k]),
                    " times, expected once each"));
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
        ChannelKey k{r, a.peer, is_gradient(a.kind)};
        ++posted[k];
        auto w = waiting.find(k);
        if (w != waiting.end()) {
          ready.push_back(w->second);
          waiting.erase(w);
        }
      } else if (a.is_recv()) {
        ChannelKey k{a.peer, r, is_gradient(a.kind)};
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
      if (a.kind == ActionKind::Forward) input_versions[a.minibatch] = a.weight_version;
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
