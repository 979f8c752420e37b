// Hierarchical topologies: the planner's closed-form optimum equals brute
// force over every level-aligned plan (tests/planner/aligned_plans.h), on
// small two- and three-level instances, chains, with and without memory
// limits, --straight and --fewer-workers, for both exact algorithms.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "planner/paper_model.h"
#include "planner/planning_graph.h"
#include "tests/planner/aligned_plans.h"

namespace pd {
namespace {

using namespace testing_aligned;

struct Instance {
  Profile profile;
  Topology topology;
  PlannerOptions options;
};

// The best closed form over the planner's space: aligned plans on all
// workers (straight: one worker per stage; fewer: the first k top-level
// units for any k).
double brute_force(const Instance& in) {
  const Topology& t = in.topology;
  const int R = t.total_workers(), top_unit = R / t.levels.back().count;
  double best = INFINITY;
  for (int used = in.options.fewer_workers ? top_unit : R; used <= R; used += top_unit)
    for (const AlignedPlan& p : aligned_plans(t, used, int(in.profile.nodes.size()))) {
      if (in.options.straight &&
          std::any_of(p.blocks.begin(), p.blocks.end(), [](const Block& b) { return b.end - b.first > 1; }))
        continue;
      best = std::min(best, closed_form(p, in.profile, t, double(in.options.memory_bytes), R));
    }
  return best;
}

void check(const Instance& in, const std::string& what, int& compared, int& infeasible) {
  const double expected = brute_force(in);
  PlanningGraph g = build_planning_graph(in.profile);
  for (PaperAlgorithm algorithm : {PaperAlgorithm::table, PaperAlgorithm::parametric}) {
    // The parametric search is exact without a memory limit only (a
    // stage's fit then does not depend on its position); the planner uses
    // the table otherwise.
    if (algorithm == PaperAlgorithm::parametric && in.options.memory_bytes) continue;
    SCOPED_TRACE(what + " algorithm=" + std::to_string(int(algorithm)));
    if (std::isinf(expected)) {
      EXPECT_ANY_THROW(plan_paper(g, in.topology, in.options, algorithm));
      ++infeasible;
      continue;
    }
    PlannedPipeline plan;
    try {
      plan = plan_paper(g, in.topology, in.options, algorithm);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_NEAR(plan.time_per_minibatch_s, expected, 1e-12 * expected);
    // The stages realise that time on consecutive aligned blocks.
    double worst = 0;
    int next_rank = 0;
    for (const auto& s : plan.stages) {
      worst = std::max(worst, s.time_s);
      EXPECT_EQ(s.ranks.front(), next_rank);
      next_rank = s.ranks.back() + 1;
      EXPECT_TRUE(aligned(in.topology, s.ranks.front(), s.ranks.back() + 1));
    }
    EXPECT_NEAR(worst, expected, 1e-12 * expected);
    if (!in.options.fewer_workers) EXPECT_EQ(next_rank, in.topology.total_workers());
    ++compared;
  }
}

TEST(HierarchicalBruteForce, LevelAlignedPlansOfSmallChains) {
  std::mt19937 rng(5);
  int compared = 0, infeasible = 0, limited = 0;
  for (int trial = 0; trial < 400; ++trial) {
    Instance in;
    const int n = std::uniform_int_distribution<int>(1, 8)(rng);
    const double param_scale = std::array<double, 3>{0, 3e6, 60e6}[trial % 3];
    in.profile = random_chain(rng, n, param_scale);
    std::uniform_real_distribution<double> gbps(0.2, 20.0);
    const int inner = std::uniform_int_distribution<int>(1, 4)(rng), outer = std::uniform_int_distribution<int>(1, 3)(rng);
    in.topology.levels = {{inner, gbps(rng)}, {outer, gbps(rng) / 10}};
    if (trial % 9 == 4) in.topology.levels = {{2, gbps(rng)}, {2, gbps(rng) / 5}, {2, gbps(rng) / 25}};
    in.options.fewer_workers = trial % 4 == 1;
    in.options.straight = trial % 5 == 2;
    if (trial % 7 >= 4) {
      // Between a small and a large single-stage footprint.
      const int R = in.topology.total_workers();
      in.options.memory_bytes = uint64_t(std::uniform_real_distribution<double>(0.5, 3.0)(rng) *
                                         (2 * param_scale * 4 + 5e6 * 4 * R));
      ++limited;
    }
    check(in,
          testing::PrintToString(trial) + " n=" + std::to_string(n) + " topology " +
              std::to_string(in.topology.levels[0].count) + "x" + std::to_string(in.topology.levels[1].count) +
              " fewer=" + std::to_string(in.options.fewer_workers) + " straight=" + std::to_string(in.options.straight) +
              " memory=" + std::to_string(in.options.memory_bytes),
          compared, infeasible);
  }
  std::printf("level-aligned plans: %d optima compared with brute force (%d instances with a memory limit), "
              "%d infeasible cases agreed\n",
              compared, limited, infeasible);
  EXPECT_GT(compared, 500);
}

}  // namespace
}  // namespace pd
