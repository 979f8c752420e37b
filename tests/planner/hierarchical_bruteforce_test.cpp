// Two-level topologies: the level-by-level solve (PipeDream's hierarchy under
// the paper's costs) equals brute force over both levels on small chains.
#include <gtest/gtest.h>

#include <array>
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

// The same optimum by a plain table DP (to check longer chains than brute
// force reaches): D[x][u] = best bottleneck of (from, x] on exactly u units.
// stage_value(a, b, m, before): `before` units precede the stage here.
double dp_partition(int from, int to, int units, bool fewer, bool straight,
                    const std::function<double(int, int, int, int)>& stage_value) {
  const int len = to - from;
  std::vector<std::vector<double>> d(len + 1, std::vector<double>(units + 1, INFINITY));
  d[0][0] = 0;
  for (int x = 1; x <= len; ++x)
    for (int u = 1; u <= units; ++u)
      for (int y = 0; y < x; ++y)
        for (int mp = 1; mp <= (straight ? 1 : u); ++mp)
          if (d[y][u - mp] < INFINITY)
            d[x][u] = std::min(d[x][u], std::max(d[y][u - mp], stage_value(from + y, from + x, mp, u - mp)));
  double best = d[len][units];
  if (fewer)
    for (int u = 1; u <= units; ++u) best = std::min(best, d[len][u]);
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

namespace pd {
namespace {

// Longer chains on up to 8 workers per server: the pruned all-ranges inner
// level and both outer algorithms against a plain two-level table DP, with
// compute-, sync- and transfer-bound stages, --straight, --fewer-workers and
// a memory limit (checked on the inner level, in-flight counts from the
// workers before a stage within its server, as the planner documents).
TEST(HierarchicalBruteForce, TwoLevelLongerChainsMatchTableDP) {
  std::mt19937 rng(17);
  int compared = 0, memory_bound = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = std::uniform_int_distribution<int>(5, 24)(rng);
    const int inner_units = std::uniform_int_distribution<int>(1, 8)(rng);
    const int outer_units = std::uniform_int_distribution<int>(1, 6)(rng);
    const bool fewer = trial % 4 == 1, straight = trial % 5 == 2, limited = trial % 7 >= 4;
    // Parameter scale: sync-bound in some trials, negligible in others.
    const double param_scale = std::array<double, 3>{0, 3e6, 60e6}[trial % 3];
    std::uniform_real_distribution<double> ms(0.05, 10.0), gbps(0.2, 20.0);
    std::uniform_int_distribution<int> mb(0, 4);
    Profile p;
    p.source_kind = "json";
    for (int i = 0; i < n; ++i) {
      ProfileNode node;
      node.id = i;
      node.forward_ms = ms(rng), node.backward_ms = ms(rng);
      // Some layers repeat exactly: ties between splits.
      if (i && trial % 2 == 0 && mb(rng) == 0) node.forward_ms = p.nodes[i - 1].forward_ms, node.backward_ms = p.nodes[i - 1].backward_ms;
      node.output_bytes = uint64_t(mb(rng)) * 2'000'000;
      node.parameter_bytes = uint64_t(mb(rng) * param_scale);
      node.activation_bytes = uint64_t(mb(rng)) * 5'000'000;
      node.optimizer_state_bytes = node.parameter_bytes;
      p.nodes.push_back(node);
      if (i) p.edges.push_back({i - 1, i});
    }
    const double b0 = gbps(rng) * 1e9, b1 = gbps(rng) * 1e9 / 10;
    Topology t;
    t.levels = {{inner_units, b0 / 1e9}, {outer_units, b1 / 1e9}};
    PlanningGraph g = build_planning_graph(p);
    std::vector<double> c(n + 1, 0), params(n + 1, 0), out(n + 1, 0), act(n + 1, 0);
    for (int i = 0; i < n; ++i) {
      c[i + 1] = c[i] + g.nodes[i].forward_s + g.nodes[i].backward_s;
      params[i + 1] = params[i] + g.nodes[i].parameter_bytes;
      act[i + 1] = act[i] + g.nodes[i].activation_bytes;
      out[i + 1] = i + 1 < n ? g.nodes[i].output_bytes : 0;
    }
    const int total_workers = inner_units * outer_units;
    double memory_limit = 0;
    if (limited) {
      // Between the smallest and the largest single-layer footprint.
      std::uniform_real_distribution<double> scale(0.5, 3.0);
      memory_limit = std::floor(scale(rng) * (2 * param_scale * 4 + 5e6 * 4 * total_workers));
    }
    auto fits = [&](int k, int j, int m, int before) {
      if (!limited) return true;
      const int in_flight = (total_workers - 1 - before) / m + 1;
      const double p = params[j] - params[k];
      return p * (in_flight + 1) + p + (act[j] - act[k]) * in_flight <= memory_limit;
    };
    auto value = [&](double compute, int k, int j, int m, double bandwidth, int shard) {
      double sync = 4.0 * (m - 1) * (params[j] - params[k]) / (m * bandwidth) / shard;
      return std::max(std::max(compute, sync) / m, 2.0 * out[k] / (bandwidth * m));
    };
    std::vector<std::vector<double>> inner(n + 1, std::vector<double>(n + 1, INFINITY));
    for (int k = 0; k < n; ++k)
      for (int j = k + 1; j <= n; ++j)
        inner[k][j] = dp_partition(k, j, inner_units, fewer, straight, [&](int a, int b, int m, int before) {
          return fits(a, b, m, before) ? value(c[b] - c[a], a, b, m, b0, 1) : INFINITY;
        });
    auto outer = [&] {
      return dp_partition(0, n, outer_units, fewer, straight, [&](int k, int j, int u, int) {
        return std::isinf(inner[k][j]) ? INFINITY : value(inner[k][j], k, j, u, b1, inner_units);
      });
    };
    const double expected = outer();
    if (limited && !std::isinf(expected)) {
      // Does the limit change the optimum? (So the test is not vacuous.)
      for (int k = 0; k < n; ++k)
        for (int j = k + 1; j <= n; ++j)
          inner[k][j] = dp_partition(k, j, inner_units, fewer, straight, [&](int a, int b, int m, int) {
            return value(c[b] - c[a], a, b, m, b0, 1);
          });
      memory_bound += outer() < expected;
    }
    PlannerOptions options;
    options.fewer_workers = fewer;
    options.straight = straight;
    options.memory_bytes = uint64_t(memory_limit);
    for (PaperAlgorithm algorithm : {PaperAlgorithm::table, PaperAlgorithm::parametric}) {
      SCOPED_TRACE(testing::Message() << "trial " << trial << " n=" << n << " " << inner_units << "x" << outer_units
                                      << " fewer=" << fewer << " straight=" << straight
                                      << " memory=" << options.memory_bytes << " algorithm=" << int(algorithm));
      if (std::isinf(expected)) {
        EXPECT_ANY_THROW(plan_paper(g, t, options, algorithm));
        continue;
      }
      PlannedPipeline plan;
      try {
        plan = plan_paper(g, t, options, algorithm);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        continue;
      }
      EXPECT_NEAR(plan.time_per_minibatch_s, expected, 1e-12 * expected);
      int used = 0;
      for (const auto& s : plan.stages) used += int(s.ranks.size());
      if (!fewer) EXPECT_EQ(used, inner_units * outer_units);
      ++compared;
    }
  }
  std::printf("two-level chains up to 24 layers: %d optima compared with a table DP (%d set by the memory limit)\n",
              compared, memory_bound);
}

}  // namespace
}  // namespace pd
