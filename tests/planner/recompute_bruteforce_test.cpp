// Activation recomputation chosen with the partition (planner/recompute.h):
// with --recompute auto the planner's optimum equals brute force over every
// level-aligned plan and, per stage, every subset of its layers to
// recompute, on small random chains, flat and two-level topologies, with
// and without replication, under memory limits. Each subset costs its
// layers' forward once more and saves, per in-flight minibatch, each
// layer's activation less its input; a stage recomputing anything holds
// once more the most one recomputed layer saves (under auto the planner
// bounds it by the most any layer of the stage saves, as here). full and every-other (fixed sets) are
// checked the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "planner/paper_model.h"
#include "planner/planning_graph.h"
#include "tests/planner/aligned_plans.h"

namespace pd {
namespace {

using namespace testing_aligned;

// The fastest stage time of layers [first, end) on r replicas with
// `in_flight` minibatches, over the subsets the mode allows; INFINITY when
// none fits.
double best_stage(const Profile& prof, int first, int end, int r, int in_flight, double sync_bw,
                  double memory, RecomputeMode mode) {
  const int n = end - first;
  double c = 0, params = 0, act = 0, opt = 0, largest = 0;
  for (int l = first; l < end; ++l) {
    const auto& node = prof.nodes[l];
    c += (node.forward_ms + node.backward_ms) / 1e3, params += node.parameter_bytes, act += node.activation_bytes;
    opt += node.optimizer_state_bytes;
    largest = std::max(largest, double(node.activation_bytes) - (l > 0 ? double(prof.nodes[l - 1].output_bytes) : 0.0));
  }
  const double sync = r > 1 ? 4.0 * (r - 1) * params / (r * sync_bw) : 0.0;
  double best = INFINITY;
  for (uint32_t set = 0; set < (1u << n); ++set) {
    bool allowed = mode == RecomputeMode::automatic;
    if (mode == RecomputeMode::none) allowed = set == 0;
    if (mode == RecomputeMode::full) allowed = set == (1u << n) - 1;
    if (mode == RecomputeMode::every_other) {
      uint32_t odd = 0;
      for (int i = 0; i < n; ++i)
        if ((first + i) % 2 == 1) odd |= 1u << i;
      allowed = set == odd;
    }
    if (!allowed) continue;
    double extra = 0, saved = 0, most = 0;
    for (int i = 0; i < n; ++i)
      if (set >> i & 1) {
        const int l = first + i;
        const double s = double(prof.nodes[l].activation_bytes) - (l > 0 ? double(prof.nodes[l - 1].output_bytes) : 0.0);
        extra += prof.nodes[l].forward_ms / 1e3;
        saved += s;
        most = std::max(most, s);
      }
    // auto plans with the stage's most as the transient (a bound); fixed sets with their own.
    if (mode == RecomputeMode::automatic) most = largest;
    const double need = params * (in_flight + 1) + opt + (act - saved) * in_flight +
                        (r > 1 ? params : 0.0) + (set ? most : 0.0);
    if (memory > 0 && need > memory) continue;
    best = std::min(best, std::max(c + extra, sync) / r);
  }
  return best;
}

double closed_form_with_recompute(const AlignedPlan& p, const Profile& prof, const Topology& t, double memory,
                                  int total_workers, RecomputeMode mode) {
  double worst = 0;
  for (size_t s = 0; s < p.blocks.size(); ++s) {
    const Block& b = p.blocks[s];
    const int r = b.end - b.first;
    const int in_flight = (total_workers - 1 - b.first) / r + 1;
    const double bw = t.levels[common_level(t, b.first, b.end - 1)].bandwidth_GBps * 1e9;
    worst = std::max(worst, best_stage(prof, p.cuts[s], p.cuts[s + 1], r, in_flight, bw, memory, mode));
    if (s > 0) {
      double bytes = double(prof.nodes[p.cuts[s] - 1].output_bytes);
      double link = t.levels[common_level(t, b.first - 1, b.first)].bandwidth_GBps * 1e9;
      worst = std::max(worst, 2.0 * bytes / (link * r));
    }
  }
  return worst;
}

double brute_force(const Profile& prof, const Topology& t, const PlannerOptions& o) {
  double best = INFINITY;
  for (const AlignedPlan& p : aligned_plans(t, t.total_workers(), int(prof.nodes.size()))) {
    if (o.straight && std::any_of(p.blocks.begin(), p.blocks.end(), [](const Block& b) { return b.end - b.first > 1; }))
      continue;
    best = std::min(best, closed_form_with_recompute(p, prof, t, double(o.memory_bytes), t.total_workers(), o.recompute));
  }
  return best;
}

TEST(RecomputeBruteForce, JointChoiceEqualsEveryPartitionTimesEverySubset) {
  std::mt19937 rng(17);
  int compared = 0, infeasible = 0, recomputing = 0, faster_than_none = 0;
  for (int trial = 0; trial < 500; ++trial) {
    const int n = std::uniform_int_distribution<int>(1, 7)(rng);
    const double param_scale = std::array<double, 2>{0, 3e6}[trial % 2];
    Profile prof = random_chain(rng, n, param_scale);
    std::uniform_real_distribution<double> gbps(0.2, 20.0);
    Topology t;
    if (trial % 3 == 0) t.levels = {{std::uniform_int_distribution<int>(1, 4)(rng), gbps(rng)}};  // flat
    else t.levels = {{std::uniform_int_distribution<int>(1, 2)(rng), gbps(rng)},
                     {std::uniform_int_distribution<int>(1, 3)(rng), gbps(rng) / 10}};
    PlannerOptions o;
    o.straight = trial % 4 == 1;
    const RecomputeMode modes[] = {RecomputeMode::automatic, RecomputeMode::automatic, RecomputeMode::full,
                                   RecomputeMode::every_other};
    o.recompute = modes[trial % 4 == 1 ? 0 : trial % 4];
    const int R = t.total_workers();
    o.memory_bytes = uint64_t(std::uniform_real_distribution<double>(0.5, 2.5)(rng) * (2 * param_scale * 4 + 5e6 * 4 * R));
    const std::string what = "trial " + std::to_string(trial) + " n=" + std::to_string(n) + " workers=" +
                             std::to_string(R) + " levels=" + std::to_string(t.levels.size()) + " mode=" +
                             to_string(o.recompute) + " straight=" + std::to_string(o.straight) +
                             " memory=" + std::to_string(o.memory_bytes);
    SCOPED_TRACE(what);
    const double expected = brute_force(prof, t, o);
    PlanningGraph g = build_planning_graph(prof);
    if (std::isinf(expected)) {
      EXPECT_ANY_THROW(plan_paper(g, t, o, PaperAlgorithm::table));
      ++infeasible;
      continue;
    }
    PlannedPipeline plan;
    try {
      plan = plan_paper(g, t, o, PaperAlgorithm::automatic);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
      continue;
    }
    EXPECT_NEAR(plan.time_per_minibatch_s, expected, 1e-12 * expected);
    double worst = 0;
    bool any = false;
    for (const auto& s : plan.stages) {
      worst = std::max(worst, s.time_s);
      any = any || !s.recompute_nodes.empty();
    }
    EXPECT_NEAR(worst, expected, 1e-12 * expected);
    recomputing += any;
    if (o.recompute == RecomputeMode::automatic) {
      PlannerOptions none = o;
      none.recompute = RecomputeMode::none;
      const double without = brute_force(prof, t, none);
      EXPECT_LE(expected, without);
      faster_than_none += expected < without;
    }
    ++compared;
  }
  std::printf("recomputation: %d optima compared with brute force (%d recompute something, %d auto plans beat no "
              "recomputation), %d infeasible cases agreed\n",
              compared, recomputing, faster_than_none, infeasible);
  EXPECT_GT(compared, 300);
  EXPECT_GT(faster_than_none, 20);
}

}  // namespace
}  // namespace pd
