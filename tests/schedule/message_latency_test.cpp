// A topology level's per-message latency (bench-comm's latency_us) in the
// simulator's cost of every message and all-reduce, and in the topology
// and plan files.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "planner/plan.h"
#include "planner/topology.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

double simulated_time(const Plan& p) {
  SimulationOptions o;
  o.schedule = testing::schedule_options(parse_schedule_kind("1f1b-rr"), 400);
  return simulate(p, o).time_per_minibatch_s;
}

// Two stages whose link bounds the pipeline: 10 MB each way at 1 GB/s is
// 10 ms a message, two messages a minibatch; 5 ms latency each makes 30 ms.
TEST(MessageLatency, AddsToEveryMessageOnTheLink) {
  Plan p = testing::make_plan({1, 1}, 0.001, 0.002, 10'000'000);
  EXPECT_NEAR(simulated_time(p), 0.020, 0.0002);
  p.topology.levels[0].latency_us = 5000;
  EXPECT_NEAR(simulated_time(p), 0.030, 0.0003);
}

// Two replicas whose all-reduce bounds the stage: 4(r-1)/r * 100 MB at
// 1 GB/s = 0.2 s per round of 2 minibatches; a ring's 2(r-1) messages add
// 2 x 50 ms.
TEST(MessageLatency, AddsToEveryStepOfARingAllReduce) {
  Plan p = testing::make_plan({2}, 0.001, 0.002, 0, 100'000'000);
  EXPECT_NEAR(simulated_time(p), 0.1, 0.001);
  p.topology.levels[0].latency_us = 50'000;
  EXPECT_NEAR(simulated_time(p), 0.15, 0.0015);
}

// Between hosts the outer level's latency counts, inside a host the inner one's.
TEST(MessageLatency, EachLevelHasItsOwn) {
  const Topology t = topology_from_json(
      nlohmann::json::parse(R"({"levels": [{"count": 2, "bandwidth_GBps": 10, "latency_us": 3},
                                           {"count": 2, "bandwidth_GBps": 0.1, "latency_us": 40}]})"),
      "test");
  EXPECT_DOUBLE_EQ(t.latency_between(0, 1), 3e-6);
  EXPECT_DOUBLE_EQ(t.latency_between(1, 2), 40e-6);
  EXPECT_DOUBLE_EQ(t.latency_between(2, 2), 0);
  EXPECT_DOUBLE_EQ(t.group_latency({0, 1, 2, 3}), 40e-6);
  // Without it, 0; a negative one is refused, naming the field.
  EXPECT_DOUBLE_EQ(flat_topology(2, 1).latency_between(0, 1), 0);
  try {
    topology_from_json(nlohmann::json::parse(R"({"levels": [{"count": 2, "bandwidth_GBps": 1, "latency_us": -1}]})"),
                       "topo.json");
    FAIL() << "a negative latency was accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("latency_us"), std::string::npos) << e.what();
  }
}

// A plan keeps its topology's latency (simulate replays plan.json as planned).
TEST(MessageLatency, PlanFilesKeepIt) {
  Plan p = testing::make_plan({1, 1}, 0.001, 0.002, 1000);
  p.topology.levels[0].latency_us = 25;
  const nlohmann::json j = plan_to_json(p);
  EXPECT_DOUBLE_EQ(j["topology"]["levels"][0]["latency_us"].get<double>(), 25);
  EXPECT_DOUBLE_EQ(topology_from_json(j["topology"], "plan").levels[0].latency_us, 25);
}

}  // namespace
}  // namespace pd
