// Tied parameters in the planner and the simulator (planner/plan_ties.h):
// a tie between the first and last layer of an 8-layer chain planned
// straight on a two-level topology (2 groups of 2 workers, the groups
// joined by a slow link) is listed with its stages, its exchange is priced
// over the link between them, and the planner's closed form agrees with
// simulate within 5%, both slower than the untied plan by the exchange.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "planner/plan_ties.h"
#include "planner/planner.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

Profile chain(bool tied) {
  ProfileNode layer;
  layer.forward_ms = 1;
  layer.backward_ms = 2;
  layer.output_bytes = 1000;
  layer.activation_bytes = 1000;
  layer.parameter_bytes = 4'000'000;
  Profile p = testing::equal_chain_profile(8, 32, layer);
  if (tied) p.ties.push_back({"0.token.weight", 4'000'000, {0, 7}});
  return p;
}

Topology two_level() {
  Topology t;
  t.levels = {{.count = 2, .bandwidth_GBps = 10.0, .latency_us = 5}, {.count = 2, .bandwidth_GBps = 0.1, .latency_us = 50}};
  return t;
}

TEST(TiedPricing, PlannerAndSimulateBothPriceTheExchangeAndAgree) {
  PlannerOptions o;
  o.straight = true;
  const Plan tied = plan_pipeline(chain(true), two_level(), o), untied = plan_pipeline(chain(false), two_level(), o);
  ASSERT_EQ(tied.stages.size(), 4u);
  ASSERT_EQ(tied.ties.size(), 1u);
  EXPECT_EQ(tied.ties[0].parameter, "0.token.weight");
  EXPECT_EQ(tied.ties[0].stages, (std::vector<int>{0, 3}));
  // Stage 0 (ranks of group 0) and stage 3 (group 1): the slow outer link.
  const double exchange = 50e-6 + 4e6 / 0.1e9;
  EXPECT_NEAR(tied.ties[0].exchange_s, exchange, 1e-12);
  EXPECT_DOUBLE_EQ(tie_exchange_s(tied, 0), exchange);
  EXPECT_DOUBLE_EQ(tie_exchange_s(tied, 1), 0.0);
  EXPECT_NEAR(tied.time_per_minibatch_s - untied.time_per_minibatch_s, exchange, 1e-9);

  SimulationOptions s;
  s.schedule.kind = parse_schedule_kind("1f1b-rr");
  s.schedule.minibatches = 400;
  const double simulated = simulate(tied, s).time_per_minibatch_s;
  EXPECT_NEAR(simulated, tied.time_per_minibatch_s, 0.05 * tied.time_per_minibatch_s)
      << "closed form " << tied.time_per_minibatch_s << " s, simulate " << simulated << " s";
  EXPECT_GT(simulated, simulate(untied, s).time_per_minibatch_s + 0.9 * exchange);
  // A flush schedule prices it once per batch too.
  s.schedule.kind = parse_schedule_kind("1f1b-flush");
  s.schedule.microbatches = 4;
  s.schedule.minibatches = 50;
  EXPECT_GT(simulate(tied, s).time_per_minibatch_s, simulate(untied, s).time_per_minibatch_s + 0.9 * exchange);

  // plan.json keeps them.
  const Plan back = plan_from_json(plan_to_json(tied), "test");
  ASSERT_EQ(back.ties.size(), 1u);
  EXPECT_EQ(back.ties[0].stages, tied.ties[0].stages);
  EXPECT_EQ(back.ties[0].bytes, 4'000'000u);
  EXPECT_DOUBLE_EQ(back.ties[0].exchange_s, tied.ties[0].exchange_s);
}

}  // namespace
}  // namespace pd
