// `plan --schedule auto`: every family's best is replayed, the
// fastest that fits is chosen, and a memory limit that rules out 1F1B-RR's
// stashing picks another family whose prediction `simulate` reproduces.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "planner/topology.h"
#include "runtime/simulator/schedule_search.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

// 8 equal layers with large stashed activations: stashing them for 4
// minibatches (1F1B-RR's stage 0) costs far more than a flush schedule's
// microbatches of a quarter of the size.
Profile activation_heavy_chain() {
  ProfileNode n;
  n.forward_ms = 10;
  n.backward_ms = 20;
  n.output_bytes = 1'000'000;
  n.activation_bytes = 50'000'000;
  n.parameter_bytes = 4'000'000;
  n.optimizer_state_bytes = 4'000'000;
  return testing::equal_chain_profile(8, 64, n);
}

TEST(ScheduleSearch, ComparesEveryFamilyAndChoosesTheFastestThatFits) {
  const Profile p = activation_heavy_chain();
  const ScheduleSearch s = search_schedules(p, flat_topology(4, 10), PlannerOptions{});
  // 1f1b-rr (the planner's), then every other searched schedule in registry order.
  std::vector<std::string> names = {"1f1b-rr"};
  for (const SearchedSchedule& searched : searched_schedules()) names.push_back(searched.kind->name());
  ASSERT_EQ(s.families.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(to_string(s.families[i].family), names[i]);
    EXPECT_TRUE(s.families[i].fits) << names[i] << ": " << s.families[i].note;
    EXPECT_GT(s.families[i].samples_per_s, 0) << names[i];
  }
  ASSERT_GE(s.chosen, 0);
  for (const auto& c : s.families) EXPECT_LE(c.samples_per_s, s.families[static_cast<size_t>(s.chosen)].samples_per_s);
}

TEST(ScheduleSearch, AMemoryLimitThatRulesOutStashingPicksAnotherFamilyAndSimulateAgrees) {
  const Profile p = activation_heavy_chain();
  PlannerOptions unlimited;
  const ScheduleSearch free = search_schedules(p, flat_topology(4, 10), unlimited);
  double flush_peak = 0;
  for (size_t i = 1; i < free.families.size(); ++i) flush_peak = std::max(flush_peak, free.families[i].peak_memory_bytes);
  ASSERT_LT(flush_peak, free.families[0].peak_memory_bytes);  // stashing is the hungriest

  PlannerOptions limited;
  limited.memory_bytes = static_cast<uint64_t>(flush_peak * 1.01);
  const ScheduleSearch s = search_schedules(p, flat_topology(4, 10), limited);
  EXPECT_FALSE(s.families[0].fits) << s.families[0].note;
  ASSERT_GT(s.chosen, 0);
  const ScheduleCandidate& c = s.families[static_cast<size_t>(s.chosen)];
  EXPECT_LE(c.peak_memory_bytes, double(limited.memory_bytes));
  SimulationOptions so;
  so.schedule = c.schedule;
  so.stashed_bytes = stashed_bytes_from_profile(c.plan, p);
  EXPECT_NEAR(simulate(c.plan, so).throughput_samples_per_s / c.samples_per_s, 1.0, 1e-9) << to_string(c.family);
}

// Microbatch times the profile measured (profile --microbatches) price the
// flush families' microbatches: 3x a linear share costs them throughput,
// where 1F1B-RR, which runs whole minibatches, is unchanged.
TEST(ScheduleSearch, MeasuredMicrobatchTimesPriceTheFlushFamilies) {
  const Profile linear = activation_heavy_chain();
  Profile measured = linear;
  for (ProfileNode& n : measured.nodes)
    for (int m : {4, 8, 16}) n.at_batch.push_back({64 / m, 3 * n.forward_ms / m, 3 * n.backward_ms / m});
  for (ProfileNode& n : measured.nodes)
    std::sort(n.at_batch.begin(), n.at_batch.end(), [](const BatchTimes& a, const BatchTimes& b) { return a.batch < b.batch; });
  const ScheduleSearch a = search_schedules(linear, flat_topology(4, 10), PlannerOptions{});
  const ScheduleSearch b = search_schedules(measured, flat_topology(4, 10), PlannerOptions{});
  EXPECT_DOUBLE_EQ(b.families[0].samples_per_s, a.families[0].samples_per_s);  // 1f1b-rr
  for (size_t i : {2u, 4u}) {  // 1f1b-flush, zb-h1: compute-bound here, so about 3x slower
    EXPECT_LT(b.families[i].samples_per_s, a.families[i].samples_per_s / 2) << to_string(b.families[i].family);
  }
}

}  // namespace
}  // namespace pd
