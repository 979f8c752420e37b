// SimulationOptions::cores: workers of one machine sharing its cores
// (processor sharing), checked on cases small enough to work out by hand.
#include <gtest/gtest.h>

#include <cstring>

#include "core/error.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

using testing::make_plan;

SimulationOptions sim_options(const ScheduleKind* kind, int64_t minibatches, double cores = 0, int threads = 1,
                              int microbatches = 1) {
  SimulationOptions o;
  o.schedule = testing::schedule_options(kind, minibatches, microbatches, WeightPolicy::Stash);
  o.cores = cores;
  o.threads_per_worker = threads;
  o.record_trace = true;
  return o;
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Two replicas with nothing to all-reduce run in lockstep: every F and B of
// the two starts together, so on one core each takes twice as long.
TEST(SimulatorSharedCores, TwoOverlappingEqualActionsOnOneCoreTakeTwiceAsLong) {
  const Plan p = make_plan({2}, 1.0, 2.0);
  std::vector<TraceEvent> own, shared;
  const SimulationReport alone = simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 8), &own);
  const SimulationReport one_core = simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 8, 1), &shared);
  ASSERT_EQ(own.size(), shared.size());
  for (size_t i = 0; i < own.size(); ++i) {
    EXPECT_DOUBLE_EQ(shared[i].start_s, 2 * own[i].start_s) << i;
    EXPECT_DOUBLE_EQ(shared[i].end_s, 2 * own[i].end_s) << i;
  }
  EXPECT_DOUBLE_EQ(alone.time_per_minibatch_s, 1.5);  // (1 + 2) s per minibatch over 2 replicas
  EXPECT_DOUBLE_EQ(one_core.time_per_minibatch_s, 3.0);
  EXPECT_DOUBLE_EQ(one_core.makespan_s, 2 * alone.makespan_s);
  for (const WorkerReport& w : one_core.workers) EXPECT_DOUBLE_EQ(w.busy_fraction, 1.0);
}

// Three lockstep replicas on two cores: each runs at 2/3 speed. Two workers
// of two threads on two cores: each at 1/2, as if one core were shared.
TEST(SimulatorSharedCores, RateIsCoresOverBusyThreads) {
  const SimulationReport three = simulate(make_plan({3}, 1.0, 2.0), sim_options(parse_schedule_kind("1f1b-rr"), 9, 2));
  EXPECT_DOUBLE_EQ(three.time_per_minibatch_s, 1.5);  // 3 s x 3/2 per 3 minibatches
  const SimulationReport threads =
      simulate(make_plan({2}, 1.0, 2.0), sim_options(parse_schedule_kind("1f1b-rr"), 8, 2, 2));
  EXPECT_DOUBLE_EQ(threads.time_per_minibatch_s, 3.0);
}

// A computation is re-timed when another starts or ends. Two stages, F 1 s
// and B 2 s each, one core, 1f1b-rr with 2 minibatches: rank 0 runs F0
// alone in [0, 1], then its F1 and rank 1's F0 share the core (1 s of work
// each at half speed) until both end at 3.
TEST(SimulatorSharedCores, ComputationIsRetimedWhenAnotherStartsOrEnds) {
  Plan p = make_plan({1, 1}, 1.0, 2.0);
  std::vector<TraceEvent> trace;
  simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 2, 1), &trace);
  // Stage 1 F takes 3 s on its own (unbalanced), so an overlap ends early.
  p.stages[1].forward_s = 3.0;
  std::vector<TraceEvent> uneven;
  simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 2, 1), &uneven);
  auto find = [](const std::vector<TraceEvent>& events, int rank, ActionKind kind, int64_t minibatch) {
    for (const TraceEvent& e : events)
      if (e.rank == rank && e.kind == kind && e.minibatch == minibatch) return e;
    ADD_FAILURE() << "no event";
    return TraceEvent{};
  };
  // Even: rank 0's F1 and rank 1's F0 overlap from 1 s to 3 s.
  EXPECT_DOUBLE_EQ(find(trace, 0, ActionKind::Forward, 0).end_s, 1.0);
  EXPECT_DOUBLE_EQ(find(trace, 0, ActionKind::Forward, 1).start_s, 1.0);
  EXPECT_DOUBLE_EQ(find(trace, 0, ActionKind::Forward, 1).end_s, 3.0);
  EXPECT_DOUBLE_EQ(find(trace, 1, ActionKind::Forward, 0).end_s, 3.0);
  // Uneven: from 1 s both share the core; rank 0's F1 (1 s of work) ends at
  // 3 s, when rank 1's F0 has done 1 of its 3 s; alone from then (rank 0
  // waits for a gradient), it needs 2 s more: it ends at 5 s.
  EXPECT_DOUBLE_EQ(find(uneven, 0, ActionKind::Forward, 1).end_s, 3.0);
  EXPECT_DOUBLE_EQ(find(uneven, 1, ActionKind::Forward, 0).start_s, 1.0);
  EXPECT_DOUBLE_EQ(find(uneven, 1, ActionKind::Forward, 0).end_s, 5.0);
}

// With the cores kept busy, a minibatch costs its whole compute over the
// cores: 4 stages of 3 s on 2 cores need 6 s per minibatch (the default
// gives 3 s), whatever the schedule's bubbles.
TEST(SimulatorSharedCores, SaturatedCoresGiveTotalComputeOverCores) {
  const Plan p = make_plan({1, 1, 1, 1}, 1.0, 2.0);
  const SimulationReport rr = simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 400, 2));
  EXPECT_NEAR(rr.time_per_minibatch_s, 6.0, 6.0 * 1e-3);
  const SimulationReport flush = simulate(p, sim_options(parse_schedule_kind("1f1b-flush"), 40, 2, 1, 8));
  // 1f1b-flush (a batch of 8 microbatches, 12 s of compute): at least
  // 12 / 2 s per batch; more, as the fill and drain leave a core idle while
  // only one worker computes - but less than the own-device replay's
  // 3 (8 + 3) / 8 s twice over.
  const double own = simulate(p, sim_options(parse_schedule_kind("1f1b-flush"), 40, 0, 1, 8)).time_per_minibatch_s;
  EXPECT_DOUBLE_EQ(own, 3.0 * 11 / 8);
  EXPECT_GT(flush.time_per_minibatch_s, 6.0);
  EXPECT_LT(flush.time_per_minibatch_s, 2 * own);
}

// cores = 0 (the default) and cores >= workers x threads are the same
// replay, bit for bit: nothing is ever slowed.
TEST(SimulatorSharedCores, EnoughCoresIsBitIdenticalToTheDefault) {
  Plan p = make_plan({2, 1, 1}, 1.0, 2.0, 1'000'000, 4'000'000, 0.01);
  p.stages[1].forward_s = 1.7;
  p.stages[2].backward_s = 2.9;
  EXPECT_EQ(SimulationOptions{}.cores, 0);
  for (const ScheduleKind* kind : {parse_schedule_kind("1f1b-rr"), parse_schedule_kind("1f1b-flush")}) {
    std::vector<TraceEvent> base_trace;
    const int microbatches = kind == parse_schedule_kind("1f1b-rr") ? 1 : 4;
    const SimulationReport base = simulate(p, sim_options(kind, 40, 0, 1, microbatches), &base_trace);
    for (auto [cores, threads] : {std::pair{4.0, 1}, std::pair{64.0, 1}, std::pair{8.0, 2}, std::pair{4.5, 1}}) {
      std::vector<TraceEvent> trace;
      const SimulationReport rep = simulate(p, sim_options(kind, 40, cores, threads, microbatches), &trace);
      EXPECT_TRUE(same_bits(rep.time_per_minibatch_s, base.time_per_minibatch_s)) << cores;
      EXPECT_TRUE(same_bits(rep.makespan_s, base.makespan_s)) << cores;
      ASSERT_EQ(trace.size(), base_trace.size());
      for (size_t i = 0; i < trace.size(); ++i) {
        EXPECT_TRUE(same_bits(trace[i].start_s, base_trace[i].start_s));
        EXPECT_TRUE(same_bits(trace[i].end_s, base_trace[i].end_s));
      }
      for (size_t r = 0; r < rep.workers.size(); ++r)
        EXPECT_TRUE(same_bits(rep.workers[r].busy_fraction, base.workers[r].busy_fraction));
    }

    EXPECT_GT(simulate(p, sim_options(kind, 40, 2, 1, microbatches)).time_per_minibatch_s, base.time_per_minibatch_s);
  }
}

// Fractional cores (a CPU quota): two lockstep replicas on 1.5 cores run
// at 3/4 speed.
TEST(SimulatorSharedCores, FractionalCoresAreAQuota) {
  const SimulationReport rep =
      simulate(make_plan({2}, 1.0, 2.0), sim_options(parse_schedule_kind("1f1b-rr"), 8, 1.5));
  EXPECT_DOUBLE_EQ(rep.time_per_minibatch_s, 2.0);  // 1.5 s x 4/3
}

TEST(SimulatorSharedCores, RefusesNegativeCoresOrThreads) {
  const Plan p = make_plan({1, 1});
  EXPECT_THROW(simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 4, -1)), UserError);
  EXPECT_THROW(simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 4, 2, 0)), UserError);
  EXPECT_THROW(simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 4, -0.5)), UserError);
}

}  // namespace
}  // namespace pd

namespace pd {
namespace {

// The optimizer step's compute (a stage's optimizer_s) runs after the
// stage's backward of each minibatch (flush: once per batch): one replica
// of F 1 s, B 2 s and a 0.5 s step takes 3.5 s per minibatch; a flush
// batch of 4 microbatches takes the step once, not four times.
TEST(SimulatorOptimizerStep, StepComputeIsCountedOncePerMinibatchOrBatch) {
  Plan p = make_plan({1}, 1.0, 2.0);
  EXPECT_DOUBLE_EQ(simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 8)).time_per_minibatch_s, 3.0);
  p.stages[0].optimizer_s = 0.5;
  EXPECT_DOUBLE_EQ(simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 8)).time_per_minibatch_s, 3.5);
  const SimulationReport flush = simulate(p, sim_options(parse_schedule_kind("1f1b-flush"), 8, 0, 1, 4));
  EXPECT_DOUBLE_EQ(flush.time_per_minibatch_s, 3.5);  // (4 x (1 + 2) / 4 + 0.5) per batch
}

}  // namespace
}  // namespace pd

namespace pd {
namespace {

// Contention for what the cores share: two lockstep replicas on two cores
// each run 1 + F slower; one worker alone on two cores is not slowed.
TEST(SimulatorSharedCores, ContentionSlowsComputationsWhileEveryCoreIsBusy) {
  SimulationOptions both = sim_options(parse_schedule_kind("1f1b-rr"), 8, 2);
  both.core_contention = 0.1;
  EXPECT_DOUBLE_EQ(simulate(make_plan({2}, 1.0, 2.0), both).time_per_minibatch_s, 1.5 * 1.1);
  SimulationOptions alone = sim_options(parse_schedule_kind("1f1b-rr"), 8, 2);
  alone.core_contention = 0.1;
  EXPECT_DOUBLE_EQ(simulate(make_plan({1}, 1.0, 2.0), alone).time_per_minibatch_s, 3.0);
  SimulationOptions no_cores = sim_options(parse_schedule_kind("1f1b-rr"), 8);
  no_cores.core_contention = 0.1;
  EXPECT_THROW(simulate(make_plan({1}, 1.0, 2.0), no_cores), UserError);
}

}  // namespace
}  // namespace pd
