// `run --plan auto`'s prediction when the workers share the machine's cores
// (plan_for_workers: the replay with SimulationOptions::cores).
#include <gtest/gtest.h>

#include "runtime/auto_plan.h"
#include "runtime/simulator/plan_search.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

// Four equal layers: a straight 4-worker plan is balanced, one stage each.
Profile four_equal_layers() {
  ProfileNode n;
  n.forward_ms = 10;
  n.backward_ms = 20;
  n.output_bytes = 1000;
  n.activation_bytes = 1000;
  n.parameter_bytes = 1000;
  return testing::equal_chain_profile(4, 32, n);
}

TEST(AutoPlanSharedCores, FewerCoresThanWorkersPredictsTheSharedReplay) {
  const Profile p = four_equal_layers();
  const Plan own = plan_for_workers(p, 4, true, 1, 0);
  EXPECT_EQ(own.predicted_by, "replay");
  EXPECT_NEAR(own.time_per_minibatch_s, 0.030, 0.030 * 1e-3);  // the slowest stage, 30 ms
  const Plan enough = plan_for_workers(p, 4, true, 1, 4);
  EXPECT_EQ(enough.predicted_by, "replay");
  EXPECT_EQ(enough.time_per_minibatch_s, own.time_per_minibatch_s);

  const Plan shared = plan_for_workers(p, 4, true, 1, 2);
  EXPECT_EQ(shared.predicted_by, "shared cores");
  EXPECT_DOUBLE_EQ(shared.shared_cores_bound_s, 0.120 / 2);  // 120 ms of compute over 2 cores
  SimulationOptions o;
  o.schedule.kind = parse_schedule_kind(shared.schedule);
  o.schedule.minibatches = replay_minibatches(shared);
  o.cores = 2;
  EXPECT_DOUBLE_EQ(shared.time_per_minibatch_s,
                   std::max(simulate(shared, o).time_per_minibatch_s, shared.shared_cores_bound_s));
  // 1f1b-rr keeps every worker busy: the cores are saturated.
  EXPECT_NEAR(shared.time_per_minibatch_s, 0.060, 0.060 * 1e-2);
  EXPECT_NEAR(shared.throughput_samples_per_s, 32 / shared.time_per_minibatch_s, 1e-9);
}

}  // namespace
}  // namespace pd
