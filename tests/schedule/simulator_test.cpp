#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profiler/profile.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

using testing::make_plan;

SimulationOptions sim_options(const ScheduleKind* kind, int64_t minibatches, int microbatches = 1,
                              WeightPolicy policy = WeightPolicy::Stash) {
  SimulationOptions o;
  o.schedule = testing::schedule_options(kind, minibatches, microbatches, policy);
  return o;
}

// The planner's paper cost model (docs/design.md §5) evaluated on a given plan:
// the slowest of each stage's (1/r) max(compute, W) and each boundary's 2 C.
double paper_model_time(const Plan& p) {
  double worst = 0;
  for (size_t s = 0; s < p.stages.size(); ++s) {
    const PlanStage& st = p.stages[s];
    double r = st.replicas;
    double bw = p.topology.levels[0].bandwidth_GBps * 1e9;
    double w = 4 * (r - 1) * double(st.parameter_bytes) / (r * bw);
    worst = std::max(worst, std::max(st.forward_s + st.backward_s, w) / r);
    if (s + 1 < p.stages.size())
      worst = std::max(worst, 2 * double(st.output_bytes) / (bw * p.stages[s + 1].replicas));
  }
  return worst;
}

TEST(Simulator, GPipeBubbleIsSMinusOneOverMPlusSMinusOne) {
  for (int S : {2, 4, 5})
    for (int M : {1, 4, 8}) {
      Plan p = make_plan(std::vector<int>(S, 1), 1.0, 2.0);
      auto rep = simulate(p, sim_options(parse_schedule_kind("gpipe"), 16, M));
      double bubble = double(S - 1) / (M + S - 1);
      for (const auto& w : rep.workers) EXPECT_NEAR(w.bubble_fraction, bubble, 1e-9) << "S=" << S << " M=" << M;
      EXPECT_NEAR(rep.time_per_minibatch_s, 3.0 * (M + S - 1) / M, 1e-9);
      for (const auto& w : rep.workers) EXPECT_EQ(w.peak_weight_versions, 1);
    }
}

// Activation recomputation (plan stages' recompute_s) is the recomputed
// layers' forward run again before each backward: GPipe's batch takes
// (M + S - 1) microbatches of forward + recompute + backward.
TEST(Simulator, RecomputationRunsTheForwardAgainBeforeEachBackward) {
  for (int M : {1, 4}) {
    Plan p = make_plan(std::vector<int>(4, 1), 1.0, 2.0);
    for (PlanStage& st : p.stages) {
      st.recompute_layers = {st.first_layer};
      st.recompute_s = 0.5;
    }
    const SimulationReport rep = simulate(p, sim_options(parse_schedule_kind("gpipe"), 16, M));
    EXPECT_NEAR(rep.time_per_minibatch_s, 3.5 * (M + 3) / M, 1e-9) << "M=" << M;
  }
}

// A microbatch's compute measured at its size replaces the linear share:
// GPipe's batch then takes (M + S - 1) microbatch times, whatever the
// minibatch's times say.
TEST(Simulator, MeasuredMicrobatchTimesReplaceTheLinearShare) {
  const int S = 4, M = 8;
  Plan p = make_plan(std::vector<int>(S, 1), 1.0, 2.0);
  SimulationOptions o = sim_options(parse_schedule_kind("gpipe"), 16, M);
  o.microbatch_times.assign(S, StageMicrobatchTimes{0.25, 0.5});  // 2x the linear share's 0.125 + 0.25
  const SimulationReport measured = simulate(p, o);
  EXPECT_NEAR(measured.time_per_minibatch_s, 0.75 * (M + S - 1), 1e-9);
  const SimulationReport linear = simulate(p, sim_options(parse_schedule_kind("gpipe"), 16, M));
  EXPECT_NEAR(linear.time_per_minibatch_s, 3.0 * (M + S - 1) / M, 1e-9);
  for (const auto& w : measured.workers) EXPECT_NEAR(w.bubble_fraction, double(S - 1) / (M + S - 1), 1e-9);
  o.microbatch_times.pop_back();
  EXPECT_THROW(simulate(p, o), UserError);  // one per stage
}

// The times come from the profile's at_batch entries, summed over each
// stage's layers; a batch the profile did not measure gives none.
TEST(Simulator, MicrobatchTimesFromProfileSumEachStagesLayersAtThatBatch) {
  Profile prof;
  prof.batch_size = 16;
  for (int i = 0; i < 4; ++i) {
    ProfileNode n;
    n.id = i;
    n.forward_ms = 10, n.backward_ms = 20;
    n.at_batch = {{2, 1.0 + i, 2.0 + i}, {4, 3.0, 5.0}};
    prof.nodes.push_back(n);
  }
  Plan p = make_plan({1, 1});
  p.stages[0].first_layer = 0, p.stages[0].last_layer = 2;
  p.stages[1].first_layer = p.stages[1].last_layer = 3;
  const std::vector<StageMicrobatchTimes> t = microbatch_times_from_profile(p, prof, 2);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_NEAR(t[0].forward_s, (1 + 2 + 3) / 1e3, 1e-12);
  EXPECT_NEAR(t[0].backward_s, (2 + 3 + 4) / 1e3, 1e-12);
  EXPECT_NEAR(t[1].forward_s, 4 / 1e3, 1e-12);
  EXPECT_NEAR(t[1].backward_s, 5 / 1e3, 1e-12);
  EXPECT_TRUE(microbatch_times_from_profile(p, prof, 8).empty());
  prof.nodes[3].at_batch.pop_back();  // batch 4 no longer measured on every node
  EXPECT_TRUE(microbatch_times_from_profile(p, prof, 4).empty());
}

TEST(Simulator, OneFOneBFlushHasTheSameBubbleButFewerActivations) {
  const int S = 4, M = 8;
  Plan p = make_plan(std::vector<int>(S, 1), 1.0, 2.0);
  auto gpipe = simulate(p, sim_options(parse_schedule_kind("gpipe"), 16, M));
  auto flush = simulate(p, sim_options(parse_schedule_kind("1f1b-flush"), 16, M));
  EXPECT_NEAR(flush.time_per_minibatch_s, gpipe.time_per_minibatch_s, 1e-9);
  for (int s = 0; s < S; ++s) {
    EXPECT_EQ(gpipe.workers[s].peak_in_flight, M);
    EXPECT_EQ(flush.workers[s].peak_in_flight, S - s);
  }
}

TEST(Simulator, StraightOneFOneBHasNoBubbleInSteadyState) {
  const int S = 4;
  Plan p = make_plan(std::vector<int>(S, 1), 1.0, 2.0, 0);
  SimulationOptions o = sim_options(parse_schedule_kind("1f1b-rr"), 100);
  o.stashed_bytes = {1000, 1000, 1000, 1000};
  auto rep = simulate(p, o);
  EXPECT_NEAR(rep.time_per_minibatch_s, 3.0, 1e-9);
  EXPECT_NEAR(rep.throughput_samples_per_s, 64 / 3.0, 1e-9);
  for (int s = 0; s < S; ++s) {
    EXPECT_NEAR(rep.workers[s].bubble_fraction, 0.0, 1e-9);
    EXPECT_EQ(rep.workers[s].peak_in_flight, S - s);
    EXPECT_EQ(rep.workers[s].peak_activation_bytes, uint64_t(1000 * (S - s)));
    EXPECT_EQ(rep.workers[s].peak_weight_versions, S - s);  // stash keeps NOAM versions at the input
  }
  auto none = simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 100, 1, WeightPolicy::None));
  for (const auto& w : none.workers) EXPECT_EQ(w.peak_weight_versions, 1);
}

TEST(Simulator, SlowestStageSetsThePace) {
  Plan p = make_plan({1, 1, 1}, 1.0, 2.0);
  p.stages[1].forward_s = 2.0;
  p.stages[1].backward_s = 4.0;
  auto rep = simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 200));
  EXPECT_NEAR(rep.time_per_minibatch_s, 6.0, 1e-6);
  EXPECT_NEAR(rep.workers[1].busy_fraction, 1.0, 1e-6);
  EXPECT_NEAR(rep.workers[0].busy_fraction, 0.5, 1e-6);
}

TEST(Simulator, ReplicationDividesTheStageTime) {
  // 2-1: stage 0 needs 6 s per minibatch on one worker, stage 1 needs 3 s.
  Plan p = make_plan({2, 1}, 1.0, 2.0);
  p.stages[0].forward_s = 2.0;
  p.stages[0].backward_s = 4.0;
  auto rep = simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 400));
  EXPECT_NEAR(rep.time_per_minibatch_s, 3.0, 0.03);
}

TEST(Simulator, BalancedReplicatedPipelineKeepsUpWithItsModel) {
  // 2-1-1, every worker 3 s per minibatch: 1.5 s per minibatch ideally.
  // Stepping right after each backward made replicas wait for each other
  // (2.25 s); with the step one backward later it is within 10%.
  Plan p = make_plan({2, 1, 1}, 0.5, 1.0);
  p.stages[0].forward_s = 1.0;
  p.stages[0].backward_s = 2.0;
  double t = simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 400)).time_per_minibatch_s;
  EXPECT_LT(t, 1.5 * 1.1);
  EXPECT_GE(t, 1.5 * (1 - 1e-9));
}

TEST(Simulator, AllReduceOverlapsComputeLikeThePlannerAssumes) {
  // W = 4 (r-1)/r * P / B: with P = 10 GB over 1 GB/s and r = 2, W = 20 s
  // per round, more than the round's 3 s of compute: 10 s per minibatch.
  Plan p = make_plan({2, 1}, 1.0, 2.0, 0, 10'000'000'000ull, 1.0);
  auto rep = simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 200));
  EXPECT_NEAR(rep.time_per_minibatch_s, 10.0, 0.1);
  // W below the compute: fully hidden.
  Plan q = make_plan({2, 1}, 1.0, 2.0, 0, 500'000'000ull, 1.0);  // W = 1 s
  q.stages[0].forward_s = 2.0;
  q.stages[0].backward_s = 4.0;
  EXPECT_NEAR(simulate(q, sim_options(parse_schedule_kind("1f1b-rr"), 200)).time_per_minibatch_s, 3.0, 0.05);
}

TEST(Simulator, AnAllReduceSlightlySlowerThanTheComputeSetsThePaceInAnyReplay) {
  // 8 replicas: W = 4 (r-1)/r * 1 GB / 1 GB/s = 3.5 s per round against 3 s
  // of compute. Steps wait for the all-reduce's start only, so its backlog
  // grows 0.5 s a round and throttles the replicas after 6 rounds: a replay
  // of 10 rounds measured the compute's 3 / 8 s per minibatch (the planner
  // then printed a data-parallel plan faster than data parallelism).
  Plan p = make_plan({8}, 1.0, 2.0, 0, 1'000'000'000ull, 1.0);
  for (int64_t minibatches : {80, 400, 4000})
    EXPECT_NEAR(simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), minibatches)).time_per_minibatch_s,
                3.5 / 8, 0.01 * 3.5 / 8)
        << minibatches << " minibatches";
}

TEST(Simulator, ActivationTransferCountsBothDirections) {
  // 2 C = 2 * 4 GB / 1 GB/s = 8 s per minibatch on the single link.
  Plan p = make_plan({1, 1}, 1.0, 2.0, 4'000'000'000ull, 0, 1.0);
  auto rep = simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 200));
  EXPECT_NEAR(rep.time_per_minibatch_s, 8.0, 0.08);
}

TEST(Simulator, MeetsThePaperCostModelWhenTransferLatencyIsHidden) {
  // Compute-, sync- and link-bound plans; the model's bound is met exactly
  // when the links add no latency (the planner's idealisation) and missed
  // by the latency otherwise.
  struct Case {
    std::vector<int> replicas;
    std::vector<double> compute;  // per stage, forward is a third
    uint64_t output_bytes, parameter_bytes;
  };
  const std::vector<Case> cases = {
      {{7, 1}, {7.0, 1.0}, 100'000'000, 200'000'000},       // compute-bound, replicated input
      {{1, 1, 1, 1}, {1.0, 3.0, 2.0, 1.0}, 1'000'000'000, 0},  // one slow stage, long transfers
      {{2, 1}, {2.0, 0.5}, 10'000'000, 10'000'000'000},     // all-reduce-bound
      {{1, 1}, {1.0, 1.0}, 3'000'000'000, 0},               // link-bound: 2 C = 6 s
  };
  for (const auto& c : cases) {
    Plan p = make_plan(c.replicas, 1.0, 1.0, c.output_bytes, c.parameter_bytes, 1.0);
    for (size_t s = 0; s < c.compute.size(); ++s) {
      p.stages[s].forward_s = c.compute[s] / 3;
      p.stages[s].backward_s = 2 * c.compute[s] / 3;
    }
    double predicted = paper_model_time(p);
    SimulationOptions o = sim_options(parse_schedule_kind("1f1b-rr"), 2000);
    double hidden = simulate(p, o).time_per_minibatch_s;  // idealised (default)
    o.realistic_latency = true;
    double real = simulate(p, o).time_per_minibatch_s;
    EXPECT_NEAR(hidden / predicted, 1.0, 0.05) << config_string(c.replicas) << ": replay " << hidden
                                               << " s, paper model " << predicted << " s";
    EXPECT_GE(real, hidden * (1 - 1e-9)) << config_string(c.replicas);
  }
}

TEST(Simulator, TransferLatencyNoamCannotHideSlowsTheStraightPipeline) {
  // 1-1-1-1, stage 1 needs 3 s, every transfer 1 s: stage 0's four
  // in-flight minibatches take 7 s of compute and 6 s of transfers per
  // round trip, more than 4 x 3 s, so the pipeline runs slower than 3 s.
  Plan p = make_plan({1, 1, 1, 1}, 1.0, 1.0, 1'000'000'000, 0, 1.0);
  std::vector<double> compute = {1.0, 3.0, 2.0, 1.0};
  for (size_t s = 0; s < 4; ++s) {
    p.stages[s].forward_s = compute[s] / 3;
    p.stages[s].backward_s = 2 * compute[s] / 3;
  }
  SimulationOptions o = sim_options(parse_schedule_kind("1f1b-rr"), 2000);
  o.realistic_latency = true;
  double t = simulate(p, o).time_per_minibatch_s;
  EXPECT_GT(t, 3.0 * 1.05);
}

TEST(Simulator, TraceHasOneTrackPerRankAndEveryComputeAction) {
  Plan p = make_plan({2, 1}, 1.0, 2.0, 1000, 1000);
  SimulationOptions o = sim_options(parse_schedule_kind("1f1b-rr"), 6);
  o.record_trace = true;
  std::vector<TraceEvent> events;
  simulate(p, o, &events);
  int computes = 0, allreduces = 0;
  for (const auto& e : events) {
    computes += e.kind == ActionKind::Forward || e.kind == ActionKind::Backward;
    allreduces += e.kind == ActionKind::AllReduce;
    EXPECT_LE(e.start_s, e.end_s);
  }
  EXPECT_EQ(computes, 2 * 6 * 2);
  EXPECT_EQ(allreduces, 3);
  std::ostringstream os;
  write_chrome_trace(os, p, events, o.schedule);
  auto j = nlohmann::json::parse(os.str());
  int named = 0, slices = 0;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M") ++named;
    if (e["ph"] == "X") ++slices;
  }
  EXPECT_EQ(named, 3 + 1);  // three ranks, one all-reduce track
  EXPECT_EQ(slices, computes + allreduces);
  EXPECT_NE(os.str().find("\"name\":\"F5\""), std::string::npos);
  EXPECT_NE(os.str().find("\"name\":\"B5\""), std::string::npos);
}

TEST(Simulator, JsonReportHasTheDocumentedFields) {
  auto rep = simulate(make_plan({2, 1}), sim_options(parse_schedule_kind("1f1b-rr"), 10));
  auto j = report_to_json(rep);
  for (const char* k : {"time_per_minibatch_s", "throughput_samples_per_s", "workers"}) EXPECT_TRUE(j.contains(k));
  ASSERT_EQ(j["workers"].size(), 3u);
  for (const char* k : {"rank", "stage", "busy_fraction", "bubble_fraction", "peak_activation_bytes",
                        "peak_weight_versions"})
    EXPECT_TRUE(j["workers"][0].contains(k)) << k;
}

TEST(Simulator, RefusesATopologyTooSmallForThePlan) {
  Plan p = make_plan({2, 2});
  p.topology = flat_topology(3, 1.0);
  EXPECT_THROW(simulate(p, sim_options(parse_schedule_kind("1f1b-rr"), 4)), UserError);
}

}  // namespace
}  // namespace pd

namespace pd {
namespace {

// Data parallelism over 4 workers, 1 s of forward and 2 s of backward, 3 GB
// of parameters on 1 GB/s links: the planner's ring takes 4 (3/4) 3 = 9 s
// per round and overlaps the round's 3 s of compute; an all-reduce whose
// bus bandwidth bench-comm measured takes 2 (3/4) 3 GB / 0.5 GB/s = 9 s
// too, but it starts after the backward and the replicas' steps wait for
// it, as the runtime's do (their next forward runs beside it): 3 + 9 - 1 s
// per round of 4 minibatches.
TEST(Simulator, MeasuredAllReduceTakesItsBusBandwidthAndTheReplicasWaitForIt) {
  Plan p = testing::make_plan({4}, 1.0, 2.0, 0, 3'000'000'000, 1.0);
  SimulationOptions o;
  o.schedule.minibatches = 400;
  o.record_trace = true;
  std::vector<TraceEvent> planner_trace, measured_trace;
  const double planner = simulate(p, o, &planner_trace).time_per_minibatch_s;
  EXPECT_NEAR(planner, 9.0 / 4, 1e-6);  // all-reduce-bound, compute hidden
  p.topology.levels[0].allreduce_GBps = 0.5;
  const SimulationReport measured = simulate(p, o, &measured_trace);
  EXPECT_NEAR(measured.time_per_minibatch_s, (3.0 + 9.0 - 1.0) / 4, 1e-6);
  int allreduces = 0;
  for (const TraceEvent& e : measured_trace)
    if (e.kind == ActionKind::AllReduce) {
      EXPECT_NEAR(e.end_s - e.start_s, 9.0, 1e-9);
      ++allreduces;
    }
  EXPECT_EQ(allreduces, 100);
  // The replicas compute 3 s of every 11.
  for (const WorkerReport& w : measured.workers) EXPECT_NEAR(w.busy_fraction, 3.0 / 11.0, 1e-6);
  // Realistic latency prices the planner's ring the same way: it starts
  // after the backward and the replicas' steps wait for it.
  p.topology.levels[0].allreduce_GBps = 0;
  o.realistic_latency = true;
  EXPECT_NEAR(simulate(p, o).time_per_minibatch_s, (3.0 + 9.0 - 1.0) / 4, 1e-6);
}

// The data parallelism above with its all-reduce measured at 0.5 GB/s.
Plan measured_data_parallel_plan() {
  Plan p = testing::make_plan({4}, 1.0, 2.0, 0, 3'000'000'000, 1.0);
  p.topology.levels[0].allreduce_GBps = 0.5;
  return p;
}

// The trace's events of one kind, on one rank (-1: on any).
std::vector<TraceEvent> events_of(const std::vector<TraceEvent>& trace, ActionKind kind, int rank = -1) {
  std::vector<TraceEvent> out;
  for (const TraceEvent& e : trace)
    if (e.kind == kind && (rank < 0 || e.rank == rank)) out.push_back(e);
  return out;
}

// The same data parallelism with the runtime's buckets: 2 GB ready halfway
// through the 2 s backward, the last 1 GB at its end. The first bucket
// (2 (3/4) 2 GB / 0.5 GB/s = 6 s) starts 1 s into the backward, the second
// (3 s) after it: a round from one step to the next is the backward's 1 s
// before the first bucket, then 6 + 3 s, so 10 s per round of 4
// minibatches instead of 11; the next forward still runs beside them.
TEST(Simulator, GradientBucketsStartDuringTheBackwardAsTheRuntimeStartsThem) {
  Plan p = measured_data_parallel_plan();
  SimulationOptions o;
  o.schedule.minibatches = 400;
  o.record_trace = true;
  o.gradient_buckets = {{{0.5, 2e9}, {1.0, 1e9}}};
  std::vector<TraceEvent> trace;
  const SimulationReport rep = simulate(p, o, &trace);
  EXPECT_NEAR(rep.time_per_minibatch_s, 10.0 / 4, 1e-6);
  const std::vector<TraceEvent> backwards = events_of(trace, ActionKind::Backward, 0);
  const std::vector<TraceEvent> allreduces = events_of(trace, ActionKind::AllReduce);
  ASSERT_EQ(allreduces.size(), 100u);
  ASSERT_EQ(backwards.size(), 100u);
  for (size_t i = 1; i < 100; ++i) {  // round 0 starts at the same 1 s into its backward
    EXPECT_NEAR(allreduces[i].start_s, backwards[i].start_s + 1.0, 1e-9) << "round " << i;
    EXPECT_NEAR(allreduces[i].end_s, backwards[i].start_s + 10.0, 1e-9) << "round " << i;
  }
  // One bucket ready at the backward's end is the unbucketed all-reduce.
  o.gradient_buckets = {{{1.0, 3e9}}};
  EXPECT_NEAR(simulate(p, o).time_per_minibatch_s, (3.0 + 9.0 - 1.0) / 4, 1e-6);
  // The planner's idealised all-reduce (no measured bus bandwidth) ignores them.
  p.topology.levels[0].allreduce_GBps = 0;
  o.gradient_buckets = {{{0.5, 2e9}, {1.0, 1e9}}};
  EXPECT_NEAR(simulate(p, o).time_per_minibatch_s, 9.0 / 4, 1e-6);
  o.gradient_buckets = {{}, {}};
  EXPECT_THROW(simulate(p, o), UserError);
  o.gradient_buckets = {{{0.0, 1e9}}};
  p.topology.levels[0].allreduce_GBps = 0.5;
  EXPECT_THROW(simulate(p, o), UserError);
}

// The same buckets with a 0.5 s optimizer step: it waits for the
// all-reduce, and the next backward (and so the next round's first bucket)
// waits for it, so a round is 1 + 6 + 3 + 0.5 s. Folded into the backward,
// as it is where nothing waits on it, it would hide behind the all-reduce
// (10 s). A replica computes 1 + 2 + 0.5 s of each round.
TEST(Simulator, TheOptimizerStepAfterTheRuntimesAllReduceIsOnThePathToTheNextRound) {
  Plan p = measured_data_parallel_plan();
  p.stages[0].optimizer_s = 0.5;
  SimulationOptions o;
  o.schedule.minibatches = 400;
  o.record_trace = true;
  o.gradient_buckets = {{{0.5, 2e9}, {1.0, 1e9}}};
  std::vector<TraceEvent> trace;
  const SimulationReport rep = simulate(p, o, &trace);
  EXPECT_NEAR(rep.time_per_minibatch_s, 10.5 / 4, 1e-6);
  for (const WorkerReport& w : rep.workers) EXPECT_NEAR(w.busy_fraction, 3.5 / 10.5, 1e-6);
  const std::vector<TraceEvent> steps = events_of(trace, ActionKind::OptimizerStep, 0);
  const std::vector<TraceEvent> allreduces = events_of(trace, ActionKind::AllReduce);
  ASSERT_EQ(steps.size(), 100u);
  for (size_t i = 1; i < 99; ++i) {
    EXPECT_NEAR(steps[i].start_s, allreduces[i].end_s, 1e-9) << "round " << i;
    EXPECT_NEAR(steps[i].end_s - steps[i].start_s, 0.5, 1e-9) << "round " << i;
  }
  // The planner's idealised all-reduce: the step is folded into the 2.5 s
  // backward, and the ring's 9 s still bound the round.
  p.topology.levels[0].allreduce_GBps = 0;
  const SimulationReport idealised = simulate(p, o);
  EXPECT_NEAR(idealised.time_per_minibatch_s, 9.0 / 4, 1e-6);
  for (const WorkerReport& w : idealised.workers) EXPECT_NEAR(w.busy_fraction, 3.5 / 9.0, 1e-6);
}

// Buckets from a profile: whole layers in backward order, a bucket closing
// at bucket_bytes, ready at its layers' share of the backward time.
TEST(Simulator, GradientBucketsFromAProfileFollowTheRuntimesBucketPlan) {
  Profile prof;
  prof.batch_size = 8;
  const double backward_ms[4] = {4, 1, 3, 2};
  const uint64_t params[4] = {3'000'000, 0, 2'000'000, 3'000'000};
  for (int i = 0; i < 4; ++i) {
    ProfileNode n;
    n.id = i;
    n.name = "l" + std::to_string(i);
    n.forward_ms = 1;
    n.backward_ms = backward_ms[i];
    n.parameter_bytes = params[i];
    prof.nodes.push_back(n);
  }
  Plan p = testing::make_plan({2, 2});
  p.stages[0].first_layer = 0, p.stages[0].last_layer = 1;
  p.stages[1].first_layer = 2, p.stages[1].last_layer = 3;
  p.stages[0].parameter_bytes = 3'000'000;
  p.stages[1].parameter_bytes = 10'000'000;  // twice the profile's: the bytes scale with it
  const auto b = gradient_buckets_from_profile(p, prof, 4'000'000);
  ASSERT_EQ(b.size(), 2u);
  // Stage 0 backward order: l1 (1 ms, no parameters), l0 (4 ms, 3 MB): one bucket at the end.
  ASSERT_EQ(b[0].size(), 1u);
  EXPECT_DOUBLE_EQ(b[0][0].ready_fraction, 1.0);
  EXPECT_DOUBLE_EQ(b[0][0].bytes, 3e6);
  // Stage 1: l3 (2 ms, 3 MB) then l2 (3 ms, 2 MB): l3 alone is under 4 MB,
  // so one bucket of both, ready at the end.
  ASSERT_EQ(b[1].size(), 1u);
  EXPECT_DOUBLE_EQ(b[1][0].bytes, 10e6);
  const auto small = gradient_buckets_from_profile(p, prof, 2'500'000);
  ASSERT_EQ(small[1].size(), 2u);
  EXPECT_DOUBLE_EQ(small[1][0].ready_fraction, 2.0 / 5.0);
  EXPECT_DOUBLE_EQ(small[1][0].bytes, 6e6);
  EXPECT_DOUBLE_EQ(small[1][1].ready_fraction, 1.0);
  EXPECT_DOUBLE_EQ(small[1][1].bytes, 4e6);
  p.stages[1].replicas = 1;
  EXPECT_TRUE(gradient_buckets_from_profile(p, prof)[1].empty());
}

// Where the group spans a level with a measured all-reduce, that level's
// figure prices it; a topology without the field keeps the ring of the
// planner (the PipeDream comparisons' plans are priced as before).
TEST(Simulator, AllReduceUsesTheWidestLevelTheGroupSpans) {
  Topology t;
  t.levels = {{2, 10.0, 0, 4.0}, {2, 1.0, 0, 0.25}};
  EXPECT_DOUBLE_EQ(t.group_allreduce_GBps({0, 1}), 4.0);
  EXPECT_DOUBLE_EQ(t.group_allreduce_GBps({0, 1, 2, 3}), 0.25);
  EXPECT_DOUBLE_EQ(t.group_allreduce_GBps({1, 2}), 0.25);
  EXPECT_DOUBLE_EQ(t.group_allreduce_GBps({2}), 0.0);
  t.levels[1].allreduce_GBps = 0;
  EXPECT_DOUBLE_EQ(t.group_allreduce_GBps({0, 1, 2, 3}), 0.0);
  // Read from JSON and written back with a plan.
  const Topology read = topology_from_json(
      nlohmann::json::parse(R"({"levels": [{"count": 2, "bandwidth_GBps": 10, "allreduce_GBps": 4},
                                           {"count": 2, "bandwidth_GBps": 1}]})"),
      "test");
  EXPECT_DOUBLE_EQ(read.levels[0].allreduce_GBps, 4.0);
  EXPECT_DOUBLE_EQ(read.levels[1].allreduce_GBps, 0.0);
  Plan p = testing::make_plan({2, 2});
  p.topology = read;
  const nlohmann::json written = plan_to_json(p)["topology"]["levels"];
  EXPECT_EQ(written[0].value("allreduce_GBps", 0.0), 4.0);
  EXPECT_FALSE(written[1].contains("allreduce_GBps"));
  EXPECT_THROW(topology_from_json(nlohmann::json::parse(
                                      R"({"levels": [{"count": 2, "bandwidth_GBps": 1, "allreduce_GBps": -1}]})"),
                                  "test"),
               UserError);
}


// The all-reduce measured with the cores kept busy prices a replay whose
// workers share the cores; other replays keep the idle-core figure. The
// same data parallelism as above: 2 (3/4) 3 GB at 0.5 GB/s = 9 s idle, at
// 0.25 GB/s = 18 s busy.
TEST(Simulator, SharedCoresPriceTheAllReduceMeasuredWithTheCoresBusy) {
  Topology t;
  t.levels = {{2, 10.0, 0, 4.0}, {2, 1.0, 0, 0.25}};
  t.levels[1].allreduce_busy_GBps = 0.125;
  EXPECT_DOUBLE_EQ(t.group_allreduce_GBps({0, 1, 2, 3}), 0.25);
  EXPECT_DOUBLE_EQ(t.group_allreduce_GBps({0, 1, 2, 3}, true), 0.125);
  EXPECT_DOUBLE_EQ(t.group_allreduce_GBps({0, 1}, true), 4.0);  // no busy figure at that level

  Plan p = measured_data_parallel_plan();
  p.topology.levels[0].allreduce_busy_GBps = 0.25;
  SimulationOptions o;
  o.schedule.minibatches = 40;
  o.record_trace = true;
  auto allreduce_durations = [&](const SimulationOptions& opt) {
    std::vector<TraceEvent> trace;
    simulate(p, opt, &trace);
    std::vector<double> d;
    for (const TraceEvent& e : events_of(trace, ActionKind::AllReduce)) d.push_back(e.end_s - e.start_s);
    return d;
  };
  for (double d : allreduce_durations(o)) EXPECT_NEAR(d, 9.0, 1e-9);
  o.cores = 2;  // 4 workers on 2 cores
  const std::vector<double> shared = allreduce_durations(o);
  ASSERT_EQ(shared.size(), 10u);
  for (double d : shared) EXPECT_NEAR(d, 18.0, 1e-9);
  o.cores = 4;  // a core per worker: nothing shared
  for (double d : allreduce_durations(o)) EXPECT_NEAR(d, 9.0, 1e-9);

  // Read from JSON, written back with a plan; never without the idle figure.
  const Topology read = topology_from_json(nlohmann::json::parse(R"({"levels": [{"count": 2, "bandwidth_GBps": 1,
      "allreduce_GBps": 0.5, "allreduce_busy_GBps": 0.25}]})"), "test");
  EXPECT_DOUBLE_EQ(read.levels[0].allreduce_busy_GBps, 0.25);
  Plan q = testing::make_plan({2});
  q.topology = read;
  EXPECT_EQ(plan_to_json(q)["topology"]["levels"][0].value("allreduce_busy_GBps", 0.0), 0.25);
  EXPECT_THROW(topology_from_json(nlohmann::json::parse(
                                      R"({"levels": [{"count": 2, "bandwidth_GBps": 1, "allreduce_busy_GBps": 0.25}]})"),
                                  "test"),
               UserError);
}

// Two stages (F 1 s, B 2 s) on one core, a 1 GB activation on a 1 GB/s
// link: the link is busy [1, 2]. Measured with the cores busy, a message
// waits 0.5 s more for its receiver's time slice - while the cores are all
// taken. With one minibatch, rank 0 waits for its gradient when the
// activation is across: the core is free and rank 1's F starts at 2. With
// two minibatches and a 0.5 GB activation (link [1, 1.5]), rank 0 is
// computing F1 when it is across: rank 1's F0 starts at 2, not 1.5. On
// own cores, or in the planner's steady state (a message is usable at
// once), nothing changes.
TEST(Simulator, SharedCoresDeliverMessagesAfterTheLatencyMeasuredWithTheCoresBusy) {
  Plan p = testing::make_plan({1, 1}, 1.0, 2.0, 1'000'000'000, 0, 1.0);
  p.topology.levels[0].latency_busy_us = 500'000;
  auto rank1_forward_start = [](const Plan& plan, double cores, bool realistic, int64_t minibatches) {
    SimulationOptions o;
    o.schedule = testing::schedule_options(parse_schedule_kind("1f1b-rr"), minibatches);
    o.cores = cores;
    o.realistic_latency = realistic;
    o.record_trace = true;
    std::vector<TraceEvent> trace;
    simulate(plan, o, &trace);
    return events_of(trace, ActionKind::Forward, 1).at(0).start_s;
  };
  EXPECT_DOUBLE_EQ(rank1_forward_start(p, 1, true, 1), 2.0);  // the core is free when it is across
  EXPECT_DOUBLE_EQ(rank1_forward_start(p, 2, true, 1), 2.0);  // a core per worker: not shared
  EXPECT_DOUBLE_EQ(rank1_forward_start(p, 1, false, 1), 1.0);
  Plan half = testing::make_plan({1, 1}, 1.0, 2.0, 500'000'000, 0, 1.0);
  half.topology.levels[0].latency_busy_us = 500'000;
  EXPECT_DOUBLE_EQ(rank1_forward_start(half, 1, true, 2), 2.0);  // rank 0's F1 holds the core at 1.5
  EXPECT_DOUBLE_EQ(rank1_forward_start(half, 2, true, 2), 1.5);
  EXPECT_DOUBLE_EQ(p.topology.latency_between(0, 1, true), 0.5);
  EXPECT_DOUBLE_EQ(p.topology.latency_between(1, 1, true), 0.0);
  EXPECT_DOUBLE_EQ(testing::make_plan({1, 1}).topology.latency_between(0, 1, true), 0.0);  // none measured: the idle one

  // Read from JSON and written back with a plan.
  const Topology read = topology_from_json(
      nlohmann::json::parse(R"({"levels": [{"count": 2, "bandwidth_GBps": 1, "latency_busy_us": 4500}]})"), "test");
  EXPECT_DOUBLE_EQ(read.levels[0].latency_busy_us, 4500);
  Plan q = testing::make_plan({2});
  q.topology = read;
  EXPECT_EQ(plan_to_json(q)["topology"]["levels"][0].value("latency_busy_us", 0.0), 4500);
  EXPECT_THROW(topology_from_json(nlohmann::json::parse(
                                      R"({"levels": [{"count": 2, "bandwidth_GBps": 1, "latency_busy_us": -1}]})"),
                                  "test"),
               UserError);
}

}  // namespace
}  // namespace pd
