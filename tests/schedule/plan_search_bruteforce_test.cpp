// `pipedream plan` (search_plan) against brute force by replay: on small
// two-level instances (up to 8 layers, up to 3 x 4 workers, with and
// without memory limits) every uniformly replicated level-aligned plan
// (every stage on r workers: straight pipelines and data parallelism among
// them) and the one-worker plan are built and replayed by the simulator.
// The planner's answer must be the fastest of those replays, or faster
// (when the closed-form optimum replays better), and each uniform plan must
// replay at its closed form - the reason the planner can trust them.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/error.h"
#include "runtime/simulator/plan_search.h"
#include "tests/planner/aligned_plans.h"

namespace pd {
namespace {

using namespace testing_aligned;

// The aligned plan as plan.json would hold it.
Plan as_plan(const AlignedPlan& a, const Profile& prof, const Topology& t) {
  Plan p;
  p.topology = t;
  p.profile.batch_size = prof.batch_size;
  for (size_t s = 0; s < a.blocks.size(); ++s) {
    PlanStage st;
    st.index = int(s);
    st.first_layer = a.cuts[s];
    st.last_layer = a.cuts[s + 1] - 1;
    for (int r = a.blocks[s].first; r < a.blocks[s].end; ++r) st.ranks.push_back(r);
    st.replicas = int(st.ranks.size());
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      st.forward_s += prof.nodes[l].forward_ms / 1e3;
      st.backward_s += prof.nodes[l].backward_ms / 1e3;
      st.parameter_bytes += prof.nodes[l].parameter_bytes;
    }
    st.compute_s = st.forward_s + st.backward_s;
    st.output_bytes = s + 1 < a.blocks.size() ? prof.nodes[st.last_layer].output_bytes : 0;
    p.stages.push_back(st);
  }
  return p;
}

bool uniform(const AlignedPlan& a) {
  for (const Block& b : a.blocks)
    if (b.end - b.first != a.blocks[0].end - a.blocks[0].first) return false;
  return true;
}

TEST(PlanSearchBruteForce, FastestReplayOfUniformLevelAlignedPlansOnSmallTwoLevelClusters) {
  std::mt19937 rng(29);
  int instances = 0, replayed = 0, limited = 0, optimum_won = 0;
  double worst_gap = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int n = std::uniform_int_distribution<int>(2, 8)(rng);
    Profile prof = random_chain(rng, n, std::array<double, 3>{0, 3e6, 60e6}[rng() % 3]);
    std::uniform_real_distribution<double> gbps(0.5, 20.0);
    Topology t;
    t.levels = {{std::uniform_int_distribution<int>(1, 4)(rng), gbps(rng)},
                {std::uniform_int_distribution<int>(1, 3)(rng), gbps(rng) / 10}};
    const int R = t.total_workers();
    PlannerOptions options;
    if (trial % 3 == 2) {
      options.memory_bytes = uint64_t(std::uniform_real_distribution<double>(0.3, 2.0)(rng) * 2e8);
      ++limited;
    }
    SCOPED_TRACE(testing::Message() << "trial " << trial << " n=" << n << " " << t.levels[0].count << "x"
                                    << t.levels[1].count << " memory=" << options.memory_bytes);
    double best = INFINITY;
    for (const AlignedPlan& a : aligned_plans(t, R, n)) {
      if (!uniform(a)) continue;
      const double closed = closed_form(a, prof, t, double(options.memory_bytes), R);
      if (std::isinf(closed)) continue;
      const double replay = replay_time(as_plan(a, prof, t));
      // (To the replay's measurement window: 1,000 minibatches.)
      EXPECT_NEAR(replay / closed, 1.0, 0.01) << "a uniform plan replays off its closed form";
      worst_gap = std::max(worst_gap, std::abs(replay / closed - 1));
      best = std::min(best, replay);
      ++replayed;
    }
    // One worker: the whole model on rank 0, nothing in flight but itself.
    AlignedPlan one{{{0, 1}}, {0, n}};
    const double one_closed = closed_form(one, prof, t, double(options.memory_bytes), 1);
    if (!std::isinf(one_closed)) best = std::min(best, replay_time(as_plan(one, prof, t)));
    PlanSearch search;
    try {
      search = search_plan(prof, t, options);
    } catch (const UserError& e) {
      EXPECT_TRUE(std::isinf(best)) << "no plan, but brute force replays one at " << best << " s: " << e.what();
      continue;
    }
    const double chosen = search.plan.time_per_minibatch_s;
    EXPECT_NEAR(chosen, replay_time(search.plan), 1e-12 * chosen) << "the prediction is not its replay";
    const std::string family = search.candidates[search.chosen].family;
    if (family.rfind("optimum", 0) == 0) {
      EXPECT_LE(chosen, best * (1 + 1e-9));
      optimum_won += chosen < best * (1 - 1e-9);
    } else {
      EXPECT_NEAR(chosen, best, 1e-9 * best) << "chose " << family;
    }
    ++instances;
  }
  std::printf("%d instances (%d with a memory limit): %d uniform plans replayed (at most %.2f%% off their closed "
              "form); the closed-form optimum replayed faster than every uniform plan in %d\n",
              instances, limited, replayed, 100 * worst_gap, optimum_won);
  EXPECT_GT(instances, 40);
}

}  // namespace
}  // namespace pd
