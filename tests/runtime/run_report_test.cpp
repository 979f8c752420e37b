// The run's steady-state throughput is taken over the window simulate uses
// (the middle half of the steps), so a slow start - fill, first touch of
// memory, MPI set-up - and the drain do not count.
#include <gtest/gtest.h>

#include "runtime/run_report.h"

namespace pd {
namespace {

TEST(SteadySecondsPerStep, LeavesOutASlowStartAndEnd) {
  // 24 steps: the first 4 take 0.5 s each, then 0.1 s, the last 2 are quick (drain).
  std::map<int64_t, double> done;
  double t = 0;
  for (int64_t s = 0; s < 24; ++s) {
    t += s < 4 ? 0.5 : s >= 22 ? 0.02 : 0.1;
    done[s] = t;
  }
  EXPECT_NEAR(steady_seconds_per_step(done), 0.1, 1e-12);
}

TEST(SteadySecondsPerStep, ReplicaSeesEveryOtherStep) {
  // A replica of a 2-way replicated last stage: steps 1, 3, 5, ... each 0.2 s apart.
  std::map<int64_t, double> done;
  for (int64_t s = 1; s < 40; s += 2) done[s] = 0.1 * double(s);
  EXPECT_NEAR(steady_seconds_per_step(done), 0.1, 1e-12);
}

TEST(SteadySecondsPerStep, ResumedRunCountsFromItsFirstStep) {
  std::map<int64_t, double> done;
  for (int64_t s = 100; s < 116; ++s) done[s] = 0.25 * double(s - 100) + (s == 100 ? -1.0 : 0.0);
  EXPECT_NEAR(steady_seconds_per_step(done), 0.25, 1e-12);
}

TEST(SteadySecondsPerStep, TooFewStepsGiveZero) {
  std::map<int64_t, double> done;
  for (int64_t s = 0; s < 7; ++s) done[s] = double(s);
  EXPECT_EQ(steady_seconds_per_step(done), 0.0);
}

}  // namespace
}  // namespace pd
