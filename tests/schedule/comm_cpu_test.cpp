// Shared cores and the communication threads' CPU (TopologyLevel::
// comm_cpu_GBps, comm_cpu_us_per_message): each end of a message, and each
// member of an all-reduce, spends CPU that competes with compute on the
// shared cores. Cases small enough to work out by hand.
#include <gtest/gtest.h>

#include <cstring>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "planner/plan.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

using testing::make_plan;

SimulationOptions on_cores(double cores, int64_t minibatches) {
  SimulationOptions o;
  o.schedule = testing::schedule_options(parse_schedule_kind("1f1b-rr"), minibatches);
  o.cores = cores;
  o.record_trace = true;
  return o;
}

TraceEvent find(const std::vector<TraceEvent>& events, int rank, ActionKind kind, int64_t minibatch) {
  for (const TraceEvent& e : events)
    if (e.rank == rank && e.kind == kind && e.minibatch == minibatch) return e;
  ADD_FAILURE() << "no event for rank " << rank << " minibatch " << minibatch;
  return TraceEvent{};
}

bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// Two stages (F 1 s, B 2 s) on one core, one minibatch, 1 GB messages; each
// end of a message costs 0.25 s of CPU at 4 GB per CPU second. Rank 0's F
// runs alone in [0, 1]; from 1 rank 1's F (1 s) shares the core with both
// ends' communication threads (0.25 s each): a third each until 1.75, then
// alone for its last 0.75 s: it ends at 2.5, not 2. Rank 1's B runs alone
// in [2.5, 4.5]; the gradient's two ends then take 0.25 s each from rank 0's
// B, which ends at 4.5 + 0.75 + 1.75 = 7. The link's time is unchanged.
TEST(SimulatorCommCpu, EachEndOfAMessageSharesTheCoresWithCompute) {
  Plan p = make_plan({1, 1}, 1.0, 2.0, 1'000'000'000, 0, 1.0);
  std::vector<TraceEvent> plain, charged;
  simulate(p, on_cores(1, 1), &plain);
  EXPECT_DOUBLE_EQ(find(plain, 1, ActionKind::Forward, 0).end_s, 2.0);
  EXPECT_DOUBLE_EQ(find(plain, 0, ActionKind::Backward, 0).end_s, 6.0);

  p.topology.levels[0].comm_cpu_GBps = 4.0;
  simulate(p, on_cores(1, 1), &charged);
  EXPECT_DOUBLE_EQ(find(charged, 0, ActionKind::Forward, 0).end_s, 1.0);
  EXPECT_DOUBLE_EQ(find(charged, 1, ActionKind::Forward, 0).start_s, 1.0);
  EXPECT_DOUBLE_EQ(find(charged, 1, ActionKind::Forward, 0).end_s, 2.5);
  EXPECT_DOUBLE_EQ(find(charged, 1, ActionKind::Backward, 0).end_s, 4.5);
  EXPECT_DOUBLE_EQ(find(charged, 0, ActionKind::Backward, 0).start_s, 4.5);
  EXPECT_DOUBLE_EQ(find(charged, 0, ActionKind::Backward, 0).end_s, 7.0);

  // A per-message cost adds to the per-byte one: 0.25 + 0.25 s per end.
  p.topology.levels[0].comm_cpu_us_per_message = 250'000;
  std::vector<TraceEvent> both;
  simulate(p, on_cores(1, 1), &both);
  // From 1: F (1 s) and two threads of 0.5 s at a third each until 2.5,
  // then F's last 0.5 s alone.
  EXPECT_DOUBLE_EQ(find(both, 1, ActionKind::Forward, 0).end_s, 3.0);
}

// Saturated cores: a minibatch costs all its CPU over the cores. Four
// stages of 3 s on one core are 12 s per minibatch; 3 boundaries x 2
// messages x 2 ends x 0.25 s add 3 s.
TEST(SimulatorCommCpu, SaturatedCoresCountTheCommunicationCpu) {
  Plan p = make_plan({1, 1, 1, 1}, 1.0, 2.0, 1'000'000'000, 0, 1.0);
  const SimulationReport plain = simulate(p, on_cores(1, 400));
  EXPECT_NEAR(plain.time_per_minibatch_s, 12.0, 12.0 * 1e-3);
  EXPECT_EQ(plain.comm_cpu_per_minibatch_s, 0.0);
  p.topology.levels[0].comm_cpu_GBps = 4.0;
  const SimulationReport charged = simulate(p, on_cores(1, 400));
  EXPECT_NEAR(charged.time_per_minibatch_s, 15.0, 15.0 * 1e-3);
  // The report says what it charged: the 3 s, per minibatch of the steady state.
  EXPECT_NEAR(charged.comm_cpu_per_minibatch_s, 3.0, 3.0 * 1e-2);
}

// An all-reduce's members each send and receive 2(r-1)/r of the
// parameters: 2 replicas, 1 GB, 1 GB per CPU second: 2 s each. Rounds of
// 2 minibatches on one core: F [0, 2], B [2, 6] (both replicas at half
// speed), the all-reduce [6, 7] (1 GB at a measured 1 GB/s bus bandwidth),
// the replicas' next F beside it and their steps after it. Without the
// charge: F [6, 8], B [8, 12]. With it, both threads spend their 2 s from
// 6: four threads share the core, the F (1 s each) end at 10 with 1 s left
// to each thread; the B (2 s each) share it four ways until the threads
// end at 14, then at half speed: 1 s left, ends at 16.
TEST(SimulatorCommCpu, AllReduceMembersSpendCpuOnTheirShare) {
  Plan p = make_plan({2}, 1.0, 2.0, 0, 1'000'000'000, 1.0);
  p.topology.levels[0].allreduce_GBps = 1.0;
  std::vector<TraceEvent> plain, charged;
  simulate(p, on_cores(1, 4), &plain);
  EXPECT_DOUBLE_EQ(find(plain, 0, ActionKind::Backward, 2).end_s, 12.0);
  p.topology.levels[0].comm_cpu_GBps = 1.0;
  simulate(p, on_cores(1, 4), &charged);
  EXPECT_DOUBLE_EQ(find(charged, 0, ActionKind::Backward, 0).end_s, 6.0);
  EXPECT_DOUBLE_EQ(find(charged, 0, ActionKind::Forward, 2).start_s, 6.0);
  EXPECT_DOUBLE_EQ(find(charged, 0, ActionKind::Forward, 2).end_s, 10.0);
  EXPECT_DOUBLE_EQ(find(charged, 0, ActionKind::Backward, 2).end_s, 16.0);
  EXPECT_DOUBLE_EQ(find(charged, 1, ActionKind::Backward, 3).end_s, 16.0);
}

// Without shared cores (own devices, or as many cores as workers) the
// fields change nothing, bit for bit; with shared cores a topology without
// them is priced as before (the tests above' `plain` replays).
TEST(SimulatorCommCpu, OwnCoresIgnoreTheCommunicationCpu) {
  Plan p = make_plan({2, 1, 1}, 1.0, 2.0, 1'000'000, 4'000'000, 0.01);
  p.stages[1].forward_s = 1.7;
  const Plan without = p;
  p.topology.levels[0].comm_cpu_GBps = 0.001;
  p.topology.levels[0].comm_cpu_us_per_message = 100;
  for (double cores : {0.0, 4.0}) {
    std::vector<TraceEvent> a, b;
    const SimulationReport ra = simulate(without, on_cores(cores, 40), &a);
    const SimulationReport rb = simulate(p, on_cores(cores, 40), &b);
    EXPECT_TRUE(same_bits(ra.time_per_minibatch_s, rb.time_per_minibatch_s)) << cores;
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(same_bits(a[i].end_s, b[i].end_s)) << i;
  }
  EXPECT_GT(simulate(p, on_cores(2, 40)).time_per_minibatch_s, simulate(without, on_cores(2, 40)).time_per_minibatch_s);
}

// Per level, read from JSON and written back with a plan; the widest
// level a group spans prices its all-reduce.
TEST(SimulatorCommCpu, TopologyCarriesTheFieldsPerLevel) {
  const Topology t = topology_from_json(
      nlohmann::json::parse(R"({"levels": [{"count": 2, "bandwidth_GBps": 10, "comm_cpu_GBps": 5},
                                           {"count": 2, "bandwidth_GBps": 1, "comm_cpu_us_per_message": 40}]})"),
      "test");
  EXPECT_DOUBLE_EQ(t.comm_cpu_between(0, 1).per_byte_s, 1.0 / 5e9);
  EXPECT_DOUBLE_EQ(t.comm_cpu_between(0, 1).per_message_s, 0.0);
  EXPECT_DOUBLE_EQ(t.comm_cpu_between(1, 2).per_message_s, 40e-6);
  EXPECT_DOUBLE_EQ(t.comm_cpu_between(1, 2).per_byte_s, 0.0);
  EXPECT_FALSE(t.comm_cpu_between(1, 1).any());
  EXPECT_DOUBLE_EQ(t.group_comm_cpu({0, 1, 2, 3}).per_message_s, 40e-6);
  EXPECT_DOUBLE_EQ(t.group_comm_cpu({0, 1}).per_byte_s, 1.0 / 5e9);
  Plan p = make_plan({2, 2});
  p.topology = t;
  const nlohmann::json written = plan_to_json(p)["topology"]["levels"];
  EXPECT_EQ(written[0].value("comm_cpu_GBps", 0.0), 5.0);
  EXPECT_FALSE(written[0].contains("comm_cpu_us_per_message"));
  EXPECT_EQ(written[1].value("comm_cpu_us_per_message", 0.0), 40.0);
  EXPECT_THROW(topology_from_json(nlohmann::json::parse(
                                      R"({"levels": [{"count": 2, "bandwidth_GBps": 1, "comm_cpu_GBps": 0}]})"),
                                  "test"),
               UserError);
}

}  // namespace
}  // namespace pd
