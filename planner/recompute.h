#pragma once
// Activation recomputation in the planner (docs/design.md §6): which of a
// stage's layers drop their stashed activations after the forward, keep
// only their input, and run their forward again just before their backward.
//
// A recomputed layer i saves, per in-flight minibatch, its activation bytes
// less its input's (the outputs of the layers feeding it) and costs its
// forward time once more per minibatch. While the stage recomputes, one
// layer's activations exist again for one minibatch: a stage recomputing
// anything holds, once, the most any of its layers saves on top
// (StageFootprint::recompute_bytes).
#include <map>
#include <optional>
#include <string_view>
#include <vector>

#include "planner/planning_graph.h"
#include "planner/stage_memory.h"
#include "planner/state_space.h"

namespace pd {

// --recompute: none; full (every layer of every stage); every-other (the
// layers of odd index, a uniform manual setting); auto (per stage, the
// fastest set that fits the memory limit - nothing without one).
enum class RecomputeMode { none, full, every_other, automatic };
const char* to_string(RecomputeMode m);  // "none", "full", "every-other", "auto"
std::optional<RecomputeMode> parse_recompute_mode(std::string_view text);
// The mode `--recompute TEXT` asks for; "" (not given): auto under a memory
// limit, none without one. UserError naming the flag for any other text.
RecomputeMode recompute_mode_option(std::string_view text, bool memory_limited);

// What recomputing a set of a stage's layers gives.
struct Recomputation {
  double forward_s = 0;     // the extra forward per minibatch
  double saved_bytes = 0;   // stashed bytes saved per in-flight minibatch (may be < 0 under full)
  double transient_bytes = 0;  // held once while recomputing (0: nothing recomputed)
  std::vector<int> nodes;   // planning-graph nodes recomputed (filled by choose() only)
};

// The recomputation of every stage of a state space.
class RecomputeChoices {
 public:
  RecomputeChoices(const PlanningGraph& g, const StateSpace& s, RecomputeMode mode);
  RecomputeMode mode() const { return mode_; }
  // Whether stages may recompute at all, and whether the set depends on the memory left (auto).
  bool enabled() const { return mode_ != RecomputeMode::none; }
  bool chosen_per_stage() const { return mode_ == RecomputeMode::automatic; }
  // full / every-other: the stage (k, j]'s fixed set; auto and none: nothing.
  Recomputation fixed(int k, int j) const;
  // auto: the fastest set of (k, j]'s layers saving at least `bytes` per
  // in-flight minibatch once its transient is paid (nullopt: none does).
  // Exact over all subsets while a stage's Pareto set of (bytes saved,
  // time) stays under kMaxFrontier points; beyond, a thinned set, whose
  // answer still saves enough (exact() says whether any was thinned).
  std::optional<Recomputation> cheapest(int k, int j, double bytes) const;
  // The set itself (nodes filled), for the plan's final stages: fixed or cheapest.
  std::optional<Recomputation> choose(int k, int j, double bytes) const;
  // A bound on the transient of any non-empty set of (k, j]: the most one
  // of its layers saves. auto plans with it (so a chosen set always fits);
  // a fixed set and the plan's memory figure use the set's own most.
  double transient(int k, int j) const;
  bool exact() const { return exact_; }
  static constexpr size_t kMaxFrontier = 4096;

  // Per planning-graph node: forward seconds, bytes saved, activation bytes.
  struct Item {
    int node = 0;
    double forward_s = 0, saved_bytes = 0, activation_bytes = 0;
    bool odd_layer = false;
  };
  const std::vector<Item>& items() const { return items_; }

 private:
  struct Point {
    double saved = 0, time = 0;
  };
  const std::vector<Point>& frontier(int k, int j) const;
  std::vector<Item> stage_items(int k, int j) const;
  const StateSpace& space_;
  RecomputeMode mode_;
  std::vector<Item> items_;  // by node; empty: recomputation off
  // Prefix spaces: [k][j - k - 1], a row built on first use; down-sets: by pair.
  mutable std::vector<std::vector<std::vector<Point>>> rows_;
  mutable std::map<std::pair<int, int>, std::vector<Point>> pairs_;
  mutable bool exact_ = true;
};

// A stage's footprint from its planning-graph nodes, `recomputed` of them
// dropping their activations less their inputs (the planner's figure for
// its plan, and `simulate`'s and `run`'s for any schedule).
StageFootprint stage_footprint(const PlanningGraph& g, const std::vector<int>& nodes, const std::vector<int>& recomputed,
                               int replicas);

// The Pareto set of (bytes saved, seconds) of subsets of the given items
// with a positive saving, cheapest first; each point's subset when asked.
// Exposed for the brute-force tests.
struct RecomputeFrontierPoint {
  double saved = 0, time = 0;
  std::vector<int> members;  // indices into the items given
};
std::vector<RecomputeFrontierPoint> recompute_frontier(const std::vector<RecomputeChoices::Item>& items,
                                                       size_t max_points, bool& thinned);

}  // namespace pd
