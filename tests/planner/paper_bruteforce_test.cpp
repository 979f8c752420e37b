// The paper cost model's optimum equals a brute-force enumeration of every
// partition into nested cuts × every replica allocation, on small random
// chains and DAGs, for both exact algorithms (table DP and parametric search).
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <random>

#include "planner/paper_model.h"
#include "planner/planning_graph.h"

namespace pd {
namespace {

Profile random_profile(std::mt19937& rng, int n, bool dag) {
  std::uniform_real_distribution<double> ms(0.1, 10.0);
  std::uniform_int_distribution<int> bytes(0, 4), coin(0, 2);
  Profile p;
  p.model = "random";
  p.batch_size = 8;
  p.source_kind = ProfileSource::json;
  for (int i = 0; i < n; ++i) {
    ProfileNode node;
    node.id = i;
    node.name = "n" + std::to_string(i);
    node.forward_ms = ms(rng);
    node.backward_ms = ms(rng);
    node.output_bytes = uint64_t(bytes(rng)) * 2'000'000;
    node.activation_bytes = uint64_t(bytes(rng)) * 1'000'000;
    node.parameter_bytes = uint64_t(bytes(rng)) * 3'000'000;
    node.optimizer_state_bytes = node.parameter_bytes;
    p.nodes.push_back(node);
  }
  for (int i = 0; i + 1 < n; ++i) {
    if (!dag) {
      p.edges.push_back({i, i + 1});
      continue;
    }
    // Every node feeds a later one (one sink), plus some skip connections.
    std::uniform_int_distribution<int> later(i + 1, n - 1);
    int to = coin(rng) ? i + 1 : later(rng);
    p.edges.push_back({i, to});
    if (coin(rng) == 0) {
      int extra = later(rng);
      if (extra != to) p.edges.push_back({i, extra});
    }
  }
  return p;
}

struct Brute {
  const PlanningGraph& g;
  double bandwidth;
  int workers;
  double memory;
  bool straight, fewer;
  std::vector<uint64_t> downsets;  // bit masks
  double best = INFINITY;

  double sum(uint64_t mask, double PlanningNode::*field) const {
    double s = 0;
    for (size_t v = 0; v < g.nodes.size(); ++v)
      if (mask >> v & 1) s += g.nodes[v].*field;
    return s;
  }
  double compute(uint64_t mask) const {
    double s = 0;
    for (size_t v = 0; v < g.nodes.size(); ++v)
      if (mask >> v & 1) s += g.nodes[v].forward_s + g.nodes[v].backward_s;
    return s;
  }
  double cut(uint64_t mask) const {
    double x = 0;
    for (size_t v = 0; v < g.nodes.size(); ++v) {
      if (!(mask >> v & 1)) continue;
      for (int w : g.out[v])
        if (!(mask >> w & 1)) {
          x += g.nodes[v].output_bytes;
          break;
        }
    }
    return x;
  }
  double stage(uint64_t before_set, uint64_t stage_set, int m, int before) const {
    double c = compute(stage_set), p = sum(stage_set, &PlanningNode::parameter_bytes);
    int in_flight = (workers - 1 - before) / m + 1;
    // planner/stage_memory.h: versions + gradient, optimizer state, the
    // stash per in-flight minibatch, and the all-reduce's copy.
    double mem = p * (in_flight + 1) + sum(stage_set, &PlanningNode::optimizer_state_bytes) +
                 sum(stage_set, &PlanningNode::activation_bytes) * in_flight + (m > 1 ? p : 0);
    if (memory > 0 && mem > memory) return INFINITY;
    double t = std::max(c, 4.0 * (m - 1) * p / (m * bandwidth)) / m;
    return std::max(t, 2.0 * cut(before_set) / (bandwidth * m));
  }
  void search(uint64_t done, int used, double worst) {
    if (worst >= best) return;
    uint64_t all = (uint64_t(1) << g.nodes.size()) - 1;
    if (done == all) {
      if (used == workers || (fewer && used <= workers)) best = worst;
      return;
    }
    for (uint64_t next : downsets) {
      if ((next & done) != done || next == done) continue;
      for (int m = 1; m <= (straight ? 1 : workers - used); ++m)
        search(next, used + m, std::max(worst, stage(done, next & ~done, m, used)));
    }
  }
  double solve() {
    int n = int(g.nodes.size());
    for (uint64_t mask = 0; mask < (uint64_t(1) << n); ++mask) {
      bool closed = true;
      for (int v = 0; v < n && closed; ++v)
        if (mask >> v & 1)
          for (int u : g.in[v]) closed &= bool(mask >> u & 1);
      if (closed) downsets.push_back(mask);
    }
    search(0, 0, 0);
    return best;
  }
};

void check_random_instances(bool dag, int instances, unsigned seed) {
  std::mt19937 rng(seed);
  int compared = 0, infeasible = 0;
  for (int trial = 0; trial < instances; ++trial) {
    int n = std::uniform_int_distribution<int>(1, dag ? 6 : 7)(rng);
    int workers = std::uniform_int_distribution<int>(1, 6)(rng);
    Profile profile = random_profile(rng, n, dag);
    PlanningGraph g = build_planning_graph(profile);
    double bandwidth_GBps = std::uniform_real_distribution<double>(0.2, 3.0)(rng);
    PlannerOptions options;
    options.straight = trial % 7 == 3;
    options.fewer_workers = trial % 5 == 1;
    if (trial % 3 == 0) options.memory_bytes = uint64_t(std::uniform_int_distribution<int>(5, 60)(rng)) * 1'000'000;
    Topology topology = flat_topology(workers, bandwidth_GBps);
    Brute brute{g, bandwidth_GBps * 1e9, workers, double(options.memory_bytes), options.straight,
                options.fewer_workers};
    double expected = brute.solve();
    for (PaperAlgorithm algorithm : {PaperAlgorithm::table, PaperAlgorithm::parametric}) {
      // With a memory limit "parametric" is the right-to-left bitset search
      // over worker counts (every worker used; --fewer-workers takes the table).
      if (algorithm == PaperAlgorithm::parametric && options.memory_bytes && options.fewer_workers) continue;
      SCOPED_TRACE(testing::Message() << "trial " << trial << " n=" << n << " workers=" << workers << " straight="
                                      << options.straight << " fewer=" << options.fewer_workers
                                      << " memory=" << options.memory_bytes << " algorithm=" << int(algorithm));
      if (std::isinf(expected)) {
        EXPECT_ANY_THROW(plan_paper(g, topology, options, algorithm));
        ++infeasible;
        continue;
      }
      PlannedPipeline plan = plan_paper(g, topology, options, algorithm);
      EXPECT_NEAR(plan.time_per_minibatch_s, expected, 1e-12 * expected);
      // The stages it returns realise that time and use the workers as asked.
      double worst = 0;
      int used = 0;
      for (const auto& s : plan.stages) worst = std::max(worst, s.time_s), used += int(s.ranks.size());
      EXPECT_NEAR(worst, expected, 1e-12 * expected);
      if (!options.fewer_workers) EXPECT_EQ(used, workers);
      EXPECT_LE(used, workers);
      ++compared;
    }
  }
  std::printf("%s: %d optima compared with brute force, %d infeasible cases agreed\n", dag ? "DAGs" : "chains",
              compared, infeasible);
}

TEST(PaperBruteForce, RandomChains) { check_random_instances(false, 1500, 1); }
TEST(PaperBruteForce, RandomDags) { check_random_instances(true, 1000, 2); }

// Beyond brute force's reach: the parametric search (with its closed-form
// replica bounds) and the table DP agree on longer chains with many workers,
// whether compute, weight sync or transfers bind.
TEST(PaperBruteForce, ParametricMatchesTableOnLongerChains) {
  std::mt19937 rng(23);
  int limited = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int n = std::uniform_int_distribution<int>(10, 60)(rng);
    const int workers = std::uniform_int_distribution<int>(2, 96)(rng);
    PlanningGraph g = build_planning_graph(random_profile(rng, n, false));
    const double bandwidth_GBps = std::array<double, 3>{0.3, 3.0, 50.0}[trial % 3];
    PlannerOptions options;
    options.straight = trial % 7 == 3;
    options.fewer_workers = trial % 5 == 1;
    // Memory limits (every worker used): the right-to-left bitset search.
    if (trial % 2 == 0 && !options.fewer_workers)
      options.memory_bytes = uint64_t(std::uniform_real_distribution<double>(5e7, 2e9)(rng));
    Topology topology = flat_topology(workers, bandwidth_GBps);
    SCOPED_TRACE(testing::Message() << "trial " << trial << " n=" << n << " workers=" << workers
                                    << " straight=" << options.straight << " fewer=" << options.fewer_workers
                                    << " memory=" << options.memory_bytes);
    double table = INFINITY, parametric = INFINITY;
    try {
      table = plan_paper(g, topology, options, PaperAlgorithm::table).time_per_minibatch_s;
    } catch (const NoFeasiblePlan&) {
    }
    try {
      parametric = plan_paper(g, topology, options, PaperAlgorithm::parametric).time_per_minibatch_s;
    } catch (const NoFeasiblePlan&) {
    }
    if (std::isinf(table)) EXPECT_TRUE(std::isinf(parametric));
    else EXPECT_NEAR(parametric, table, 1e-12 * table);
    limited += options.memory_bytes > 0 && !std::isinf(table);
  }
  std::printf("%d of 60 with a memory limit that fits\n", limited);
  EXPECT_GT(limited, 5);
}

}  // namespace
}  // namespace pd
