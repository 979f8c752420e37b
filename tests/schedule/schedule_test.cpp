#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <map>
#include <set>
#include <string>

#include "core/error.h"
#include "runtime/schedule/check.h"
#include "runtime/schedule/schedule.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

using testing::make_plan;

ScheduleOptions rr(int64_t minibatches, WeightPolicy policy = WeightPolicy::Stash) {
  return testing::schedule_options(parse_schedule_kind("1f1b-rr"), minibatches, 1, policy);
}

ScheduleOptions flush(const ScheduleKind* kind, int64_t batches, int microbatches) {
  return testing::schedule_options(kind, batches, microbatches);
}

// "F0 F1 B0 ..." of one worker's compute actions.
std::string compute_order(const Schedule& s, int rank) {
  std::string out;
  for (const Action& a : s.actions(rank)) {
    if (!a.is_compute()) continue;
    if (!out.empty()) out += ' ';
    out += (a.kind == ActionKind::Forward ? "F" : "B") +
           std::to_string(s.options().microbatches > 1 ? a.microbatch : a.minibatch);
  }
  return out;
}

// Version used by F and B of each minibatch on each rank.
struct Used {
  int64_t f = -1, b = -1;
};
std::map<std::pair<int, int64_t>, Used> versions_used(const Schedule& s) {
  std::map<std::pair<int, int64_t>, Used> out;
  for (int r = 0; r < s.workers(); ++r)
    for (const Action& a : s.actions(r)) {
      if (a.kind == ActionKind::Forward) out[{r, a.minibatch}].f = a.weight_version;
      if (a.kind == ActionKind::Backward) out[{r, a.minibatch}].b = a.weight_version;
    }
  return out;
}

int64_t peak_in_flight(const Schedule& s, int rank) {
  int64_t now = 0, peak = 0;
  for (const Action& a : s.actions(rank)) {
    if (a.kind == ActionKind::Forward) peak = std::max(peak, ++now);
    if (a.kind == ActionKind::Backward) --now;
  }
  return peak;
}

void expect_valid(const Schedule& s) {
  auto v = check_schedule(s);
  EXPECT_TRUE(v.empty()) << to_string(s.options().kind) << ": " << v.front();
}

const std::vector<std::vector<int>> kConfigs = {{1, 1, 1, 1}, {2, 1, 1}, {7, 1}, {3, 2, 2, 1}, {1, 3}, {2, 2}};

TEST(Schedule1F1B, StraightPipelineOrderIsWarmUpThenAlternate) {
  Schedule s(make_plan({1, 1, 1, 1}), rr(8));
  EXPECT_EQ(s.noam(), 4);
  EXPECT_EQ(compute_order(s, 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 F6 B3 F7 B4 B5 B6 B7");
  EXPECT_EQ(compute_order(s, 2), "F0 F1 B0 F2 B1 F3 B2 F4 B3 F5 B4 F6 B5 F7 B6 B7");
  EXPECT_EQ(compute_order(s, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F6 B6 F7 B7");
  for (int r = 0; r < 4; ++r) EXPECT_EQ(peak_in_flight(s, r), 4 - r);
}

TEST(Schedule1F1B, StraightPipelineMessagesAndSteps) {
  Schedule s(make_plan({1, 1, 1}), rr(3));
  auto list = s.actions(1);
  // recv-act, F, send-act for m=0 first; a gradient arrives before each B;
  // every B is followed by its gradient send and one optimizer step.
  ASSERT_GE(list.size(), 3u);
  EXPECT_EQ(list[0].kind, ActionKind::RecvActivation);
  EXPECT_EQ(list[0].peer, 0);
  EXPECT_EQ(list[0].tag, 0);
  EXPECT_EQ(list[1].kind, ActionKind::Forward);
  EXPECT_EQ(list[2].kind, ActionKind::SendActivation);
  EXPECT_EQ(list[2].peer, 2);
  for (size_t i = 0; i < list.size(); ++i) {
    if (list[i].kind != ActionKind::Backward) continue;
    EXPECT_EQ(list[i - 1].kind, ActionKind::RecvGradient);
    EXPECT_EQ(list[i - 1].tag, 2 * list[i].minibatch + 1);
    EXPECT_EQ(list[i + 1].kind, ActionKind::SendGradient);
    EXPECT_EQ(list[i + 1].peer, 0);
    EXPECT_EQ(list[i + 2].kind, ActionKind::OptimizerStep);
    EXPECT_EQ(list[i + 2].version_created, list[i].minibatch + 1);
  }
  expect_valid(s);
}

TEST(Schedule1F1B, StashStageSUsesMMinusDepthBehindIt) {
  const int S = 4;
  const int64_t M = 12;
  Schedule s(make_plan({1, 1, 1, 1}), rr(M, WeightPolicy::Stash));
  expect_valid(s);
  auto used = versions_used(s);
  for (int st = 0; st < S; ++st)
    for (int64_t m = 0; m < M; ++m) {
      int64_t want = std::max<int64_t>(0, m - (S - 1 - st));
      EXPECT_EQ(used[std::make_pair(st, m)].f, want) << "stage " << st << " m " << m;
      EXPECT_EQ(used[std::make_pair(st, m)].b, want) << "stage " << st << " m " << m;
    }
}

TEST(Schedule1F1B, VerticalUnreplicatedUsesMMinusNoamPlusOne) {
  const int64_t M = 12;
  for (auto replicas : std::vector<std::vector<int>>{{1, 1, 1, 1}, {1, 1}, {1, 1, 1, 1, 1, 1}}) {
    Schedule s(make_plan(replicas), rr(M, WeightPolicy::Vertical));
    expect_valid(s);
    auto used = versions_used(s);
    for (int st = 0; st < s.stages(); ++st)
      for (int64_t m = 0; m < M; ++m) {
        int64_t want = std::max<int64_t>(0, m - s.noam() + 1);
        EXPECT_EQ(used[std::make_pair(st, m)].f, want);
        EXPECT_EQ(used[std::make_pair(st, m)].b, want);
      }
  }
}

TEST(Schedule1F1B, NoneBackwardUsesNewestWeights) {
  Schedule s(make_plan({1, 1, 1}), rr(9, WeightPolicy::None));
  expect_valid(s);
  auto used = versions_used(s);
  // Stage 0 runs F(m) on m - 2 but B(m) after m updates: stale forward, fresh backward.
  for (int64_t m = 2; m < 9; ++m) {
    EXPECT_EQ(used[std::make_pair(0, m)].f, m - 2);
    EXPECT_EQ(used[std::make_pair(0, m)].b, m);
  }
  for (int64_t m = 0; m < 9; ++m) EXPECT_EQ(used[std::make_pair(2, m)].b, m);  // last stage: never stale
}

TEST(Schedule1F1B, WarmUpAndNoamFollowDesign) {
  Schedule a(make_plan({3, 2, 2, 1}), rr(24));
  EXPECT_EQ(a.noam(), 3);
  EXPECT_EQ(a.warmup(0), 2);
  EXPECT_EQ(a.warmup(1), 2);
  EXPECT_EQ(a.warmup(2), 1);
  EXPECT_EQ(a.warmup(3), 0);
  Schedule b(make_plan({7, 1}), rr(28));
  EXPECT_EQ(b.noam(), 2);
  EXPECT_EQ(b.warmup(0), 1);
  EXPECT_EQ(b.warmup(1), 0);
  // The limit is reached and never exceeded on every worker.
  for (const Schedule* s : {&a, &b})
    for (int r = 0; r < s->workers(); ++r) EXPECT_EQ(peak_in_flight(*s, r), s->in_flight_limit(r)) << r;
}

TEST(Schedule1F1B, RoundRobinRouting) {
  Plan plan = make_plan({3, 2, 2, 1});
  Schedule s(plan, rr(24));
  for (int r = 0; r < s.workers(); ++r) {
    int st = s.stage_of(r);
    for (const Action& a : s.actions(r)) {
      if (a.is_compute()) EXPECT_EQ(s.rank_for(st, a.minibatch), r);
      if (a.kind == ActionKind::SendActivation || a.kind == ActionKind::RecvGradient)
        EXPECT_EQ(a.peer, plan.stages[st + 1].ranks[a.minibatch % plan.stages[st + 1].replicas]);
      if (a.kind == ActionKind::RecvActivation || a.kind == ActionKind::SendGradient)
        EXPECT_EQ(a.peer, plan.stages[st - 1].ranks[a.minibatch % plan.stages[st - 1].replicas]);
    }
  }
  // Rank 4 is replica 1 of stage 1: minibatches 1, 3, 5, ...
  EXPECT_EQ(compute_order(s, 4).substr(0, 8), "F1 F3 F5");
}

TEST(Schedule1F1B, ReplicatedStepWaitsOneBackward) {
  // Replica 0 of a 2-1 stage 0: B(0), start all-reduce 0, F, then step 0
  // just before B(2) - not right after B(0).
  Schedule s(make_plan({2, 1}), rr(8));
  std::string seq;
  for (const Action& a : s.actions(0)) {
    if (a.kind == ActionKind::Forward) seq += cat("F", a.minibatch, " ");
    if (a.kind == ActionKind::Backward) seq += cat("B", a.minibatch, " ");
    if (a.kind == ActionKind::AllReduce) seq += cat("A", a.round, " ");
    if (a.kind == ActionKind::OptimizerStep) seq += cat("S", a.round, " ");
  }
  EXPECT_EQ(seq, "F0 F2 B0 A0 F4 S0 B2 A1 F6 S1 B4 A2 S2 B6 A3 S3 ");
}

TEST(Schedule1F1B, ReplicatedStagesUpdateTogetherInRounds) {
  const int64_t M = 21;
  Schedule s(make_plan({3, 2, 2, 1}), rr(M));
  for (int r = 0; r < s.workers(); ++r) {
    int rep = s.replicas(s.stage_of(r));
    int64_t round = 0, version = 0;
    for (const Action& a : s.actions(r)) {
      if (a.kind == ActionKind::AllReduce) EXPECT_GT(rep, 1);
      if (a.kind != ActionKind::OptimizerStep) continue;
      EXPECT_EQ(a.round, round);
      EXPECT_EQ(a.gradient_count, std::min<int64_t>(rep, M - round * rep));
      EXPECT_EQ(a.version_created, std::min<int64_t>(M, (round + 1) * rep));
      version = a.version_created;
      ++round;
    }
    EXPECT_EQ(round, s.rounds(s.stage_of(r)));
    EXPECT_EQ(version, M);
  }
}

TEST(Schedule1F1B, AllPoliciesValidOnReplicatedPlans) {
  for (const auto& cfg : kConfigs)
    for (auto policy : {WeightPolicy::Stash, WeightPolicy::Vertical, WeightPolicy::None})
      for (int64_t M : {1, 5, 10, 23}) {
        Schedule s(make_plan(cfg), rr(M, policy));
        auto v = check_schedule(s);
        EXPECT_TRUE(v.empty()) << config_string(cfg) << " " << to_string(policy) << " M=" << M << ": "
                               << v.front();
        for (int r = 0; r < s.workers(); ++r) EXPECT_LE(peak_in_flight(s, r), s.warmup(s.stage_of(r)) + 1);
      }
}

TEST(Schedule1F1B, VerticalReplicatedUsesNewestVersionNotNewerThanInput) {
  const int64_t M = 30;
  Schedule s(make_plan({3, 2, 2, 1}), rr(M, WeightPolicy::Vertical));
  expect_valid(s);
  auto used = versions_used(s);
  for (int r = 0; r < s.workers(); ++r) {
    int st = s.stage_of(r);
    int rep = s.replicas(st);
    for (const Action& a : s.actions(r)) {
      if (a.kind != ActionKind::Forward) continue;
      int64_t v = s.input_version(a.minibatch);
      EXPECT_EQ(a.weight_version, v / rep * rep);
      EXPECT_EQ(used[std::make_pair(r, a.minibatch)].b, a.weight_version);
    }
  }
  // Stage 0 (3 replicas, warm-up 2, steps one backward late):
  // v(m) = 3 * max(0, m div 3 - 2 - 1).
  EXPECT_EQ(s.input_version(5), 0);
  EXPECT_EQ(s.input_version(9), 0);
  EXPECT_EQ(s.input_version(12), 3);
  EXPECT_EQ(s.input_version(17), 6);
}

TEST(ScheduleFlush, GPipeRunsAllForwardsThenAllBackwards) {
  Schedule s(make_plan({1, 1, 1, 1}), flush(parse_schedule_kind("gpipe"), 2, 4));
  expect_valid(s);
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(compute_order(s, r), "F0 F1 F2 F3 B0 B1 B2 B3 F0 F1 F2 F3 B0 B1 B2 B3");
    EXPECT_EQ(peak_in_flight(s, r), 4);
  }
}

TEST(ScheduleFlush, OneFOneBFlushBoundsInFlight) {
  Schedule s(make_plan({1, 1, 1, 1}), flush(parse_schedule_kind("1f1b-flush"), 2, 6));
  expect_valid(s);
  EXPECT_EQ(compute_order(s, 0), "F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5 F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5");
  EXPECT_EQ(compute_order(s, 3), "F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5 F0 B0 F1 B1 F2 B2 F3 B3 F4 B4 F5 B5");
  for (int r = 0; r < 4; ++r) EXPECT_EQ(peak_in_flight(s, r), 4 - r);
}

TEST(ScheduleFlush, OneVersionPerBatchAndStepAveragesWholeBatch) {
  for (const auto& cfg : kConfigs)
    for (const ScheduleKind* kind : {parse_schedule_kind("gpipe"), parse_schedule_kind("1f1b-flush")})
      for (int micro : {1, 3, 4, 8}) {
        Schedule s(make_plan(cfg), flush(kind, 3, micro));
        auto v = check_schedule(s);
        ASSERT_TRUE(v.empty()) << config_string(cfg) << " " << to_string(kind) << " M=" << micro << ": "
                               << v.front();
        for (int r = 0; r < s.workers(); ++r) {
          int64_t steps = 0;
          for (const Action& a : s.actions(r)) {
            if (a.is_compute()) EXPECT_EQ(a.weight_version, a.minibatch);
            if (a.kind == ActionKind::OptimizerStep) {
              EXPECT_EQ(a.version_created, ++steps);
              EXPECT_EQ(a.gradient_count, micro);
            }
            if (a.is_compute()) EXPECT_EQ(s.rank_for(s.stage_of(r), a.microbatch), r);
          }
          EXPECT_EQ(steps, 3);
          EXPECT_LE(peak_in_flight(s, r), s.in_flight_limit(r));
        }
      }
}

TEST(ScheduleOptions, RejectsWhatDoesNotApply) {
  Plan p = make_plan({2, 1});
  ScheduleOptions o = flush(parse_schedule_kind("gpipe"), 2, 4);
  o.policy = WeightPolicy::Vertical;
  EXPECT_THROW(Schedule(p, o), UserError);
  ScheduleOptions m = rr(4);
  m.microbatches = 4;
  EXPECT_THROW(Schedule(p, m), UserError);
  EXPECT_THROW(Schedule(p, rr(0)), UserError);
  Plan bad = p;
  bad.stages[1].ranks = {1, 2};
  EXPECT_THROW(Schedule(bad, rr(4)), UserError);
  bad = p;
  bad.stages[1].ranks = {0};
  EXPECT_THROW(Schedule(bad, rr(4)), UserError);
  EXPECT_THROW(parse_schedule_kind("pipedream"), UserError);
  EXPECT_THROW(parse_weight_policy("fresh"), UserError);
  EXPECT_STREQ(parse_schedule_kind("1f1b-flush")->name(), "1f1b-flush");
}

TEST(ScheduleFormat, WorkerListIsReadable) {
  Schedule s(make_plan({2, 1}), rr(4));
  std::string text = format_worker_schedule(s, 1);
  EXPECT_NE(text.find("stage 0 of 2, replica 1 of 2"), std::string::npos) << text;
  EXPECT_NE(text.find("F(m=1, v=0)"), std::string::npos) << text;
  EXPECT_NE(text.find("send-act(m=1) -> rank 2 [tag 2]"), std::string::npos) << text;
  EXPECT_NE(text.find("allreduce(round 0, 2 grads, 1 local)"), std::string::npos) << text;
  EXPECT_NE(text.find("step(round 0, 2 grads) -> v=2"), std::string::npos) << text;
  EXPECT_THROW(format_worker_schedule(s, 3), UserError);
}

}  // namespace
}  // namespace pd

namespace pd {
namespace {

// The simulator counts the versions in-flight minibatches hold with
// forward_version() instead of remembering each forward's; it must agree
// with the versions the forwards actually carry.
TEST(ScheduleCursor, ForwardVersionPredictsEveryForward) {
  for (const auto& replicas : std::vector<std::vector<int>>{{1, 1, 1, 1}, {2, 1, 1}, {7, 1}, {3, 2, 2, 1}, {1, 3}})
    for (WeightPolicy policy : {WeightPolicy::Stash, WeightPolicy::Vertical}) {
      ScheduleOptions o;
      o.policy = policy;
      o.minibatches = 23;
      Schedule s(testing::make_plan(replicas), o);
      for (int r = 0; r < s.workers(); ++r) {
        ActionCursor probe = s.cursor(r);
        int64_t local = 0;
        for (const Action& a : s.actions(r))
          if (a.kind == ActionKind::Forward)
            EXPECT_EQ(probe.forward_version(local++), a.weight_version)
                << "rank " << r << " minibatch " << a.minibatch << " policy " << to_string(policy);
        EXPECT_GT(local, 0);
      }
    }
}

// A built schedule answers what its lists imply, so the executor and the
// simulator ask it instead of the registry (runtime/schedule/README.md).
// has_weight_passes: exactly the schedules whose lists hold W's.
TEST(ScheduleData, WeightPassesAreReadOffTheLists) {
  std::set<std::string> with_w;
  for (const ScheduleKind* k : schedule_kinds()) {
    const int workers = 4, per_worker = stages_per_worker(k, 1);
    const int m = microbatches_for(k, 0, workers, [](int) { return 8; });  // 1f1b-rr: 1
    const Schedule s(make_plan(std::vector<int>(static_cast<size_t>(workers * per_worker), 1)),
                     testing::schedule_options(k, 2, m));
    bool any_w = false;
    for (int r = 0; r < s.workers(); ++r)
      for (const Action& a : s.actions(r)) any_w = any_w || a.kind == ActionKind::BackwardWeight;
    EXPECT_EQ(s.has_weight_passes(), any_w) << k->name();
    if (s.has_weight_passes()) with_w.insert(k->name());
  }
  EXPECT_EQ(with_w, (std::set<std::string>{"zb-h1", "zb-h2", "zb-v", "dualpipev"}));
}

// oldest_version_needed: after k forwards a worker's next forward is its
// k-th, and the oldest version it may still need is that forward's (2bw,
// vertical); stash and the flush schedules keep versions for the items in
// flight alone.
TEST(ScheduleData, OldestVersionNeededIsTheNextForwardsVersion) {
  const std::vector<std::pair<Plan, ScheduleOptions>> cases = {
      {make_plan({1, 1, 1, 1}), testing::schedule_options(parse_schedule_kind("2bw"), 6, 4)},
      {make_plan({2, 1, 1}), rr(23, WeightPolicy::Vertical)},
      {make_plan({1, 1, 1, 1}), rr(23, WeightPolicy::Vertical)},
  };
  for (const auto& [plan, o] : cases) {
    const Schedule s(plan, o);
    for (int r = 0; r < s.workers(); ++r) {
      int64_t k = 0;
      for (const Action& a : s.actions(r))
        if (a.kind == ActionKind::Forward)
          EXPECT_EQ(s.oldest_version_needed(s.stage_of(r), s.replica_of(r), k++), a.weight_version)
              << to_string(o.kind) << " rank " << r << " forward " << k - 1;
      EXPECT_GT(k, 0);
    }
  }
  for (const ScheduleOptions& o : {rr(10), flush(parse_schedule_kind("1f1b-flush"), 3, 4)}) {
    const Schedule s(make_plan({1, 1, 1}), o);
    EXPECT_EQ(s.oldest_version_needed(1, 0, 2), std::numeric_limits<int64_t>::max()) << to_string(o.kind);
  }
}

}  // namespace
}  // namespace pd
