// zb-h1 and interleaved-1f1b: generated lists pass the checker,
// the simulator gives the papers' bubbles on uniform stages, the memory
// bounds hold, schedule files carry W and chunks, and the checker rejects
// what breaks the split.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include "core/error.h"
#include "runtime/schedule/check.h"
#include "runtime/schedule/schedule_file.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

using testing::make_plan;

ScheduleOptions flush_options(const ScheduleKind* kind, int microbatches, int64_t batches = 2, int virtual_stages = 1) {
  return testing::schedule_options(kind, batches, microbatches, WeightPolicy::Stash, virtual_stages);
}

// S unreplicated stages with F = 1 and B = 2 (zb-h1: B = W = 1); for
// interleaved, S * v stages of 1/v of that, so a worker's compute is the same.
Plan uniform(int stages, double scale = 1.0) {
  return make_plan(std::vector<int>(static_cast<size_t>(stages), 1), 1.0 * scale, 2.0 * scale);
}

double mean_bubble(const SimulationReport& rep) {
  double sum = 0;
  for (const auto& w : rep.workers) sum += w.bubble_fraction;
  return sum / static_cast<double>(rep.workers.size());
}

SimulationReport simulated(const Plan& plan, const ScheduleOptions& o) {
  SimulationOptions so;
  so.schedule = o;
  return simulate(plan, so);
}

std::string first_violation(const Schedule& s, const std::vector<std::vector<Action>>& lists) {
  auto v = check_schedule(s, lists);
  return v.empty() ? std::string() : v.front();
}

TEST(ZeroBubble, GeneratedListsPassTheChecker) {
  for (int S : {1, 2, 3, 4, 8})
    for (int M : {1, 2, 3, 4, 7, 8, 16}) {
      const Schedule s(uniform(S), flush_options(parse_schedule_kind("zb-h1"), M));
      EXPECT_EQ(check_schedule(s), std::vector<std::string>{}) << "S=" << S << " M=" << M;
    }
}

TEST(ZeroBubble, EveryBHasItsWOnTheSameWorkerAfterIt) {
  const Schedule s(uniform(4), flush_options(parse_schedule_kind("zb-h1"), 8, 1));
  for (int r = 0; r < 4; ++r) {
    std::vector<int> b_at(8, -1), w_at(8, -1);
    const auto list = s.actions(r);
    for (size_t i = 0; i < list.size(); ++i) {
      if (list[i].kind == ActionKind::Backward) b_at[list[i].microbatch] = static_cast<int>(i);
      if (list[i].kind == ActionKind::BackwardWeight) w_at[list[i].microbatch] = static_cast<int>(i);
    }
    for (int m = 0; m < 8; ++m) {
      EXPECT_GE(b_at[m], 0);
      EXPECT_GT(w_at[m], b_at[m]) << "rank " << r << " microbatch " << m;
    }
  }
}

TEST(ZeroBubble, BubbleIsAThirdOfOneFOneBOnUniformStagesAtTheSamePeak) {
  for (int S : {4, 8})
    for (int M : {8, 16, 32}) {
      const Plan plan = uniform(S);
      const SimulationReport flush = simulated(plan, flush_options(parse_schedule_kind("1f1b-flush"), M, 8));
      const SimulationReport zb = simulated(plan, flush_options(parse_schedule_kind("zb-h1"), M, 8));
      // 1F1B: (S-1)/(M+S-1); ZB-H1 with F = B = W: (S-1)/(3M+S-1).
      EXPECT_NEAR(mean_bubble(flush), double(S - 1) / (M + S - 1), 1e-9) << "S=" << S << " M=" << M;
      EXPECT_NEAR(mean_bubble(zb), double(S - 1) / (3 * M + S - 1), 1e-9) << "S=" << S << " M=" << M;
      int64_t flush_peak = 0;
      for (size_t r = 0; r < flush.workers.size(); ++r) {
        // Between F and B each stage holds what it holds under 1F1B; until W
        // at most the pipeline's 1F1B peak (stage 0's S).
        EXPECT_EQ(zb.workers[r].peak_in_flight, flush.workers[r].peak_in_flight);
        flush_peak = std::max(flush_peak, flush.workers[r].peak_held);
      }
      for (const auto& w : zb.workers) EXPECT_LE(w.peak_held, flush_peak);
    }
}

TEST(ZeroBubble, TheWeightShareSplitsTheBackwardTime) {
  // B + W always take the profile's backward time: the batch's work is the same.
  const Plan plan = uniform(4);
  SimulationOptions so;
  so.schedule = flush_options(parse_schedule_kind("zb-h1"), 8, 4);
  so.weight_gradient_share = 0.25;
  const SimulationReport rep = simulate(plan, so);
  const double work_per_batch = 8 * (1.0 + 2.0) / 8;  // plan times are per batch, split over microbatches
  EXPECT_NEAR(rep.workers[0].busy_fraction * rep.time_per_minibatch_s, work_per_batch, 1e-9);
  so.weight_gradient_share = 1.5;
  EXPECT_THROW(simulate(plan, so), UserError);
}

TEST(ZeroBubble, ReplicatedPlansAreRefused) {
  EXPECT_THROW(Schedule(make_plan({2, 1}), flush_options(parse_schedule_kind("zb-h1"), 4)), UserError);
}

TEST(ZeroBubble, CheckerRejectsAWBeforeItsBAndAStepBeforeAW) {
  const Schedule s(uniform(3), flush_options(parse_schedule_kind("zb-h1"), 4, 1));
  auto lists = build_schedule(uniform(3), s.options());
  auto& l = lists[2];
  auto b = std::find_if(l.begin(), l.end(), [](const Action& a) { return a.kind == ActionKind::Backward; });
  auto w = std::find_if(l.begin(), l.end(), [&](const Action& a) {
    return a.kind == ActionKind::BackwardWeight && a.microbatch == b->microbatch;
  });
  std::iter_swap(b, w);
  EXPECT_NE(first_violation(s, lists).find("W(b=0 mb=0, v=0): has no B before it"), std::string::npos)
      << first_violation(s, lists);

  lists = build_schedule(uniform(3), s.options());
  auto& l0 = lists[0];
  auto last_w = std::find_if(l0.rbegin(), l0.rend(), [](const Action& a) { return a.kind == ActionKind::BackwardWeight; });
  std::iter_swap(last_w, l0.rbegin());  // the step now comes before the batch's last W
  EXPECT_NE(first_violation(s, lists).find("steps with 0 backwards and 1 weight gradients"), std::string::npos)
      << first_violation(s, lists);
}

TEST(ZeroBubble, AWInAScheduleThatDoesNotSplitIsRejected) {
  const Plan plan = uniform(2);
  const Schedule s(plan, flush_options(parse_schedule_kind("1f1b-flush"), 2, 1));
  auto lists = build_schedule(plan, s.options());
  Action w;
  w.kind = ActionKind::BackwardWeight;
  w.minibatch = 0;
  w.weight_version = 0;
  lists[1].insert(lists[1].end() - 1, w);
  EXPECT_NE(first_violation(s, lists).find("does not split the backward"), std::string::npos)
      << first_violation(s, lists);
}

TEST(Interleaved, GeneratedListsPassTheChecker) {
  for (int S : {2, 3, 4})
    for (int v : {1, 2, 3})
      for (int groups : {1, 2, 4}) {
        const Schedule s(uniform(S * v), flush_options(parse_schedule_kind("interleaved-1f1b"), S * groups, 2, v));
        EXPECT_EQ(s.workers(), S);
        EXPECT_EQ(check_schedule(s), std::vector<std::string>{}) << "S=" << S << " v=" << v << " M=" << S * groups;
      }
}

TEST(Interleaved, StageKRunsOnWorkerKModS) {
  const Schedule s(uniform(8), flush_options(parse_schedule_kind("interleaved-1f1b"), 4, 1, 2));
  for (int k = 0; k < 8; ++k) EXPECT_EQ(s.ranks(k), std::vector<int>{k % 4});
  for (const Action& a : s.actions(3))
    if (a.kind == ActionKind::SendActivation && a.chunk == 0) EXPECT_EQ(a.peer, 0);  // stage 3 -> stage 4
}

TEST(Interleaved, BubbleMatchesTheClosedForm) {
  for (int S : {4, 8})
    for (int M : {8, 16, 32}) {
      const int v = 2;
      const SimulationReport rep =
          simulated(uniform(S * v, 1.0 / v), flush_options(parse_schedule_kind("interleaved-1f1b"), M, 8, v));
      EXPECT_NEAR(mean_bubble(rep), double(S - 1) / (v * M + S - 1), 1e-9) << "S=" << S << " M=" << M;
    }
}

TEST(Interleaved, RefusesPlansAndMicrobatchesThatDoNotFit) {
  EXPECT_THROW(Schedule(uniform(6), flush_options(parse_schedule_kind("interleaved-1f1b"), 4, 1, 4)), UserError);  // 6 % 4
  EXPECT_THROW(Schedule(uniform(2), flush_options(parse_schedule_kind("interleaved-1f1b"), 4, 1, 2)), UserError);  // 1 worker
  EXPECT_THROW(Schedule(uniform(8), flush_options(parse_schedule_kind("interleaved-1f1b"), 6, 1, 2)), UserError);  // 6 % 4
  EXPECT_THROW(Schedule(uniform(4), flush_options(parse_schedule_kind("1f1b-flush"), 4, 1, 2)), UserError);
}

TEST(Interleaved, ChannelsOfDifferentBoundariesMayInterleave) {
  // Worker 3 sends chunk 0's activations to worker 0 (stage 3 -> 4); they
  // are their own channel, whatever order other boundaries' messages take.
  const Plan plan = uniform(8);
  const Schedule s(plan, flush_options(parse_schedule_kind("interleaved-1f1b"), 8, 1, 2));
  EXPECT_EQ(check_schedule(s, build_schedule(plan, s.options())), std::vector<std::string>{});
}

TEST(TwoBW, GeneratedListsPassTheCheckerAndHoldTwoVersions) {
  for (const std::vector<int>& replicas : std::vector<std::vector<int>>{{1, 1, 1, 1}, {2, 1, 1}, {1, 2}, {3, 1}})
    for (int M : {4, 6, 8}) {
      const Plan plan = make_plan(replicas);
      const ScheduleOptions o = flush_options(parse_schedule_kind("2bw"), M, 6);
      EXPECT_EQ(check_schedule(Schedule(plan, o)), std::vector<std::string>{}) << plan.config << " M=" << M;
      const SimulationReport rep = simulated(plan, o);
      for (const auto& w : rep.workers) EXPECT_LE(w.peak_weight_versions, 2) << plan.config << " rank " << w.rank;
      EXPECT_EQ(rep.workers.front().peak_weight_versions, 2) << plan.config;
    }
}

TEST(TwoBW, BatchBRunsOnVersionBMinusOneAndNeverDrains) {
  const Plan plan = uniform(4);
  const Schedule s(plan, flush_options(parse_schedule_kind("2bw"), 4, 3));
  bool forward_after_step_before_next_batch_done = false;
  int64_t steps = 0;
  for (const Action& a : s.actions(0)) {
    if (a.kind == ActionKind::OptimizerStep) ++steps;
    if (a.kind == ActionKind::Forward) {
      EXPECT_EQ(a.weight_version, a.minibatch > 0 ? a.minibatch - 1 : 0);
      if (a.minibatch > steps) forward_after_step_before_next_batch_done = true;  // batch b+1 before b's step
    }
  }
  EXPECT_TRUE(forward_after_step_before_next_batch_done);
  // The continuous 1F1B has no per-batch bubble: uniform stages are busy.
  SimulationReport rep = simulated(plan, flush_options(parse_schedule_kind("2bw"), 8, 16));
  EXPECT_NEAR(mean_bubble(rep), 0.0, 1e-9);
}

TEST(TwoBW, RefusesFewerMicrobatchesThanStages) {
  EXPECT_THROW(Schedule(uniform(4), flush_options(parse_schedule_kind("2bw"), 3, 2)), UserError);
}

TEST(ScheduleFiles, CarryWAndChunksBothWays) {
  const std::vector<std::pair<Plan, ScheduleOptions>> cases = {
      {uniform(4), flush_options(parse_schedule_kind("zb-h1"), 8)},
      {uniform(8), flush_options(parse_schedule_kind("interleaved-1f1b"), 4, 2, 2)}};
  for (const auto& [plan, o] : cases) {
    const Schedule s(plan, o);
    const ScheduleFile exported = export_schedule(s);
    std::ostringstream csv, json;
    write_schedule_csv(csv, exported);
    write_schedule_json(json, exported);
    for (const std::string& text : {csv.str(), json.str()}) {
      const ScheduleFile back = parse_schedule(text, "test");
      EXPECT_EQ(back.options.virtual_stages, o.virtual_stages);
      ASSERT_EQ(back.lists.size(), exported.lists.size());
      for (size_t r = 0; r < back.lists.size(); ++r) {
        ASSERT_EQ(back.lists[r].size(), exported.lists[r].size());
        for (size_t i = 0; i < back.lists[r].size(); ++i) {
          EXPECT_EQ(format_action(back.lists[r][i], true), format_action(exported.lists[r][i], true));
          EXPECT_EQ(back.lists[r][i].tag, exported.lists[r][i].tag);
        }
      }
      EXPECT_NO_THROW(checked_schedule(plan, back, "test"));
    }
  }
  std::ostringstream csv;
  write_schedule_csv(csv, export_schedule(Schedule(uniform(4), flush_options(parse_schedule_kind("zb-h1"), 4))));
  EXPECT_NE(csv.str().find("\n3,3,W,0,0,0"), std::string::npos) << csv.str();
}

}  // namespace
}  // namespace pd
