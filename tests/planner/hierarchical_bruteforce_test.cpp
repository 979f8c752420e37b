// Two-level topologies: the level-by-level solve (PipeDream's hierarchy under
// the paper's costs) equals brute force over both levels on small chains.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>

#include "planner/paper_model.h"
#include "planner/planning_graph.h"

namespace pd {
namespace {

// Best bottleneck of layers (from, to] split into stages whose replica
// counts sum to `units` (or at most `units` with `fewer`).
double brute_partition(int from, int to, int units, bool fewer,
                       const std::function<double(int, int, int)>& stage_value) {
  double best = INFINITY;
  std::function<void(int, int, double)> go = [&](int at, int used, double worst) {
    if (at == to) {
      if (used == units || (fewer && used <= units)) best = std::min(best, worst);
      return;
    }
    for (int next = at + 1; next <= to; ++next)
      for (int m = 1; used + m <= units; ++m) go(next, used + m, std::max(worst, stage_value(at, next, m)));
  };
  go(from, 0, 0);
  return best;
}

TEST(HierarchicalBruteForce, TwoLevelChains) {
  std::mt19937 rng(5);
  int compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 6)(rng);
    const int inner_units = std::uniform_int_distribution<int>(1, 3)(rng);
    const int outer_units = std::uniform_int_distribution<int>(1, 3)(rng);
    const bool fewer = trial % 4 == 1;
    std::uniform_real_distribution<double> ms(0.1, 10.0), gbps(0.2, 20.0);
    std::uniform_int_distribution<int> mb(0, 4);
    Profile p;
    p.source_kind = "json";
    for (int i = 0; i < n; ++i) {
      ProfileNode node;
      node.id = i;
      node.forward_ms = ms(rng), node.backward_ms = ms(rng);
      node.output_bytes = uint64_t(mb(rng)) * 2'000'000;
      node.parameter_bytes = uint64_t(mb(rng)) * 3'000'000;
      p.nodes.push_back(node);
      if (i) p.edges.push_back({i - 1, i});
    }
    const double b0 = gbps(rng) * 1e9, b1 = gbps(rng) * 1e9 / 10;
    Topology t;
    t.levels = {{inner_units, b0 / 1e9}, {outer_units, b1 / 1e9}};
    PlanningGraph g = build_planning_graph(p);
    std::vector<double> c(n + 1, 0), params(n + 1, 0), out(n + 1, 0);
    for (int i = 0; i < n; ++i) {
      c[i + 1] = c[i] + g.nodes[i].forward_s + g.nodes[i].backward_s;
      params[i + 1] = params[i] + g.nodes[i].parameter_bytes;
      out[i + 1] = i + 1 < n ? g.nodes[i].output_bytes : 0;
    }
    auto value = [&](double compute, int k, int j, int m, double bandwidth, int shard) {
      double sync = 4.0 * (m - 1) * (params[j] - params[k]) / (m * bandwidth) / shard;
      return std::max(std::max(compute, sync) / m, 2.0 * out[k] / (bandwidth * m));
    };
    auto inner = [&](int k, int j) {
      return brute_partition(k, j, inner_units, fewer,
                             [&](int a, int b, int m) { return value(c[b] - c[a], a, b, m, b0, 1); });
    };
    double expected = brute_partition(0, n, outer_units, fewer, [&](int k, int j, int u) {
      double in = inner(k, j);
      return std::isinf(in) ? INFINITY : value(in, k, j, u, b1, inner_units);
    });
    PlannerOptions options;
    options.fewer_workers = fewer;
    for (PaperAlgorithm algorithm : {PaperAlgorithm::table, PaperAlgorithm::parametric}) {
      SCOPED_TRACE(testing::Message() << "trial " << trial << " n=" << n << " " << inner_units << "x" << outer_units
                                      << " fewer=" << fewer << " algorithm=" << int(algorithm));
      if (std::isinf(expected)) {
        EXPECT_ANY_THROW(plan_paper(g, t, options, algorithm));
        continue;
      }
      PlannedPipeline plan = plan_paper(g, t, options, algorithm);
      EXPECT_NEAR(plan.time_per_minibatch_s, expected, 1e-12 * expected);
      int used = 0;
      for (const auto& s : plan.stages) used += int(s.ranks.size());
      if (!fewer) EXPECT_EQ(used, inner_units * outer_units);
      ++compared;
    }
  }
  std::printf("two-level chains: %d optima compared with brute force\n", compared);
}

}  // namespace
}  // namespace pd
