// zb-h2: checker-clean lists, at most twice 1F1B's peak held, and in the
// steady state of several batches a smaller bubble than zb-h1's.
#include <gtest/gtest.h>

#include <memory>

#include "core/error.h"
#include "runtime/schedule/check.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

Plan uniform(int stages) { return testing::make_plan(std::vector<int>(static_cast<size_t>(stages), 1), 1.0, 2.0); }

TEST(ZeroBubbleH2, ListsPassTheCheckerAndHoldAtMostTwiceOneFOneB) {
  for (int S : {1, 2, 3, 4, 8})
    for (int M : {1, 2, 3, 4, 7, 8, 16}) {
      const Schedule s(uniform(S), testing::schedule_options(parse_schedule_kind("zb-h2"), 3, M));
      const auto v = check_schedule(s);
      EXPECT_TRUE(v.empty()) << "S=" << S << " M=" << M << ": " << v.front();
      for (int w = 0; w < S; ++w) EXPECT_LE(s.held_limit(w), 2 * S) << "S=" << S << " M=" << M;
    }
}

TEST(ZeroBubbleH2, SteadyStateBubbleBelowZeroBubbleH1s) {
  for (int M : {8, 16}) {
    SimulationOptions h1, h2;
    h1.schedule = testing::schedule_options(parse_schedule_kind("zb-h1"), 8, M);
    h2.schedule = testing::schedule_options(parse_schedule_kind("zb-h2"), 8, M);
    const double t1 = simulate(uniform(4), h1).time_per_minibatch_s, t2 = simulate(uniform(4), h2).time_per_minibatch_s;
    EXPECT_LT(t2, t1) << "M=" << M;
    std::printf("zb-h2 M=%d: %.3f per batch (zb-h1 %.3f; no bubble: %.3f)\n", M, t2, t1, 3.0);
  }
}

}  // namespace
}  // namespace pd
