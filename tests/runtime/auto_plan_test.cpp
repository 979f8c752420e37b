// `run --plan auto`'s prediction when the workers share the machine's cores
// (plan_for_workers: the replay with SimulationOptions::cores).
#include <gtest/gtest.h>

#include "core/error.h"

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
  EXPECT_EQ(own.predicted_by, PredictedBy::replay);
  EXPECT_NEAR(own.time_per_minibatch_s, 0.030, 0.030 * 1e-3);  // the slowest stage, 30 ms
  const Plan enough = plan_for_workers(p, 4, true, 1, 4);
  EXPECT_EQ(enough.predicted_by, PredictedBy::replay);
  EXPECT_EQ(enough.time_per_minibatch_s, own.time_per_minibatch_s);

  const Plan shared = plan_for_workers(p, 4, true, 1, 2);
  EXPECT_EQ(shared.predicted_by, PredictedBy::shared_cores);
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

// A flush run of `run --plan auto`: the plan was profiled at the run's
// microbatch (--batch / M), so a batch is M of the plan's stage times. With
// a device per worker, 1f1b-flush takes (M + S - 1) microbatch times per
// batch; on 2 cores for 4 workers, at least the batch's compute over 2.
TEST(AutoPlanSharedCores, FlushPredictionRunsMMicrobatchesOfTheProfiledBatch) {
  const Profile p = four_equal_layers();  // 30 ms per layer at batch 32
  const Plan plan = plan_for_workers(p, 4, true, 1, 0);
  ScheduleOptions s;
  s.kind = parse_schedule_kind("1f1b-flush");
  s.microbatches = 8;
  const double per_batch = 0.030 * (8 + 4 - 1);
  EXPECT_NEAR(flush_samples_per_s(plan, s), 8 * 32 / per_batch, 8 * 32 / per_batch * 1e-6);
  const double shared = flush_samples_per_s(plan, s, 1, 2);
  EXPECT_LE(shared, 8 * 32 / (8 * 4 * 0.030 / 2) * (1 + 1e-9));  // the cores bound
  EXPECT_LT(shared, flush_samples_per_s(plan, s));
  s.kind = parse_schedule_kind("1f1b-rr");
  EXPECT_THROW(flush_samples_per_s(plan, s), UserError);
}

}  // namespace
}  // namespace pd
