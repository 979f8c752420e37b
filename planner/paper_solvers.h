#pragma once
// What the paper cost model's solvers share (planner/paper_model.cpp puts
// them together): one level of the hierarchy as a group sees it, the stage
// costs of the level-aligned model, the tiles of inner levels, and each
// solver's entry. Internal to the planner.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "planner/planner_options.h"
#include "planner/recompute.h"
#include "planner/stage_memory.h"
#include "planner/state_space.h"

namespace pd::paper {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One level of the hierarchy, as one group of it sees it: `units` units
// (workers at level 0, groups of the level below above it) of
// `unit_workers` workers each, joined by `bandwidth`. The group's first
// item is entered over `entry_bandwidth` (the link of the boundary in front
// of the group: a higher level's, or this level's at the top), and its
// first worker has rank `base` (it decides in-flight counts, so memory).
struct Level {
  int index = 0;
  int units = 1;
  int unit_workers = 1;
  double bandwidth = 1e9;        // bytes/s
  int entry_level = 0;           // the level whose link is in front of the group
  double entry_bandwidth = 1e9;  // bytes/s, that link's
  int base = 0;
};

struct LevelStage {
  int from = 0, to = 0, units = 1;  // states (from, to], on `units` units
};

// The optimal time of every range on one unit of the level below (a
// "tile"), for each way the unit can be entered and, with a memory limit,
// each position of the unit. Layout: [variant][j * n + k].
struct TileTables {
  int unit_workers = 1;       // workers per tile
  int lowest_entry = 0;       // entry levels lowest_entry..top
  int positions = 1;          // 1 without a memory limit
  std::vector<std::vector<double>> table;
  const std::vector<double>& get(int entry_level, int base) const {
    int position = positions == 1 ? 0 : base / unit_workers;
    return table[size_t(entry_level - lowest_entry) * positions + position];
  }
};

// Stage costs of the level-aligned model (planner/README.md): an item of a
// group is either one stage on u >= 1 whole units (at level 0: u workers)
// - compute/r with r = u·unit_workers replicas, a ring all-reduce over this
// level's links, the transfer into it over the boundary's link - or, above
// level 0, one unit running the optimal sub-pipeline of its range (a tile).
class StageCosts {
 public:
  StageCosts(const StateSpace& s, Level level, int total_workers, double memory, const TileTables* tiles,
             int stage_replicas, const RecomputeChoices* recompute = nullptr, const PlannerOptions* flushing = nullptr)
      : s_(s), level_(level), total_workers_(total_workers), memory_(memory), tiles_(tiles),
        stage_replicas_(stage_replicas), recompute_(recompute && recompute->enabled() ? recompute : nullptr),
        weight_versions_(flushing ? flushing->weight_versions : 0),
        flushing_(weight_versions_ > 0 ? flushing : nullptr) {
    if (tiles_ && !memory_limited()) {
      entry_tile_ = &tiles_->get(level_.entry_level, 0);
      inner_tile_ = &tiles_->get(level_.index, 0);
    }
  }

  // A lower bound on any item's time per unit: the range's compute spread
  // over one unit's workers. Additive (prefix sums).
  double compute(int k, int j) const { return (s_.compute[j] - s_.compute[k]) / level_.unit_workers; }
  double raw_compute(int k, int j) const { return s_.compute[j] - s_.compute[k]; }
  // Ring all-reduce of the stage's weights among r replicas, per round of r
  // minibatches: 2(r-1)/r of the bytes out and as many in, on one link.
  double sync(int k, int j, int r) const {
    return r > 1 ? 4.0 * (r - 1) * (s_.parameters[j] - s_.parameters[k]) / (r * level_.bandwidth) : 0.0;
  }
  // Activation in and gradient out, per minibatch, on a replica of a stage
  // on m units whose `before` units precede it in the group.
  double transfer(int k, int m, int before) const {
    double bw = before == 0 ? level_.entry_bandwidth : level_.bandwidth;
    return 2.0 * s_.cut_bytes[k] / (bw * double(m) * level_.unit_workers);
  }
  // For closed-form replica estimates (lower bounds, top level only).
  double sync_coefficient(int k, int j) const {
    return (s_.parameters[j] - s_.parameters[k]) * (4.0 / (level_.bandwidth * level_.unit_workers));
  }
  double transfer_coefficient(int k) const {
    return s_.cut_bytes[k] * (2.0 / (level_.bandwidth * level_.unit_workers));
  }
  // The stage's footprint with recomputation r (default: full and
  // every-other's fixed set, nothing under auto and none).
  StageFootprint footprint(int k, int j, int m) const { return footprint(k, j, m, fixed_recomputation(k, j)); }
  // A flushing schedule's item is a share of the minibatch: so are its
  // working memory and a recomputed layer's transient.
  StageFootprint footprint(int k, int j, int m, const Recomputation& r) const {
    return {s_.parameters[j] - s_.parameters[k],
            s_.optimizer_state[j] - s_.optimizer_state[k],
            s_.activations[j] - s_.activations[k] - r.saved_bytes,
            m * level_.unit_workers,
            s_.workspace(k, j) * item_share(),
            r.transient_bytes * item_share(),
            weight_versions_};
  }
  // What the stage recomputes where it sits (planner/recompute.h): full
  // and every-other's fixed set; under auto the fastest set that brings it
  // within the memory limit, nothing when it fits as it is; nullopt when no
  // set does.
  std::optional<Recomputation> recomputation(int k, int j, int m, int before) const {
    if (!recompute_ || !recompute_->chosen_per_stage()) return fixed_recomputation(k, j);
    if (!memory_limited()) return Recomputation{};
    const double f = in_flight(m, before);
    const double plain = stage_memory_bytes(footprint(k, j, m, {}), f);
    if (plain <= memory_) return Recomputation{};
    if (!(f > 0)) return std::nullopt;  // (holds no activations: recomputing saves nothing)
    return recompute_->cheapest(k, j, (plain + recompute_->transient(k, j) * item_share() - memory_) / f);
  }
  // The set's nodes, for the plan (nullopt: nothing fits).
  std::optional<Recomputation> recomputed_nodes(int k, int j, int m, int before) const {
    if (!recompute_) return Recomputation{};
    const std::optional<Recomputation> r = recomputation(k, j, m, before);
    if (!r || (r->forward_s == 0 && r->saved_bytes == 0)) return r;
    const double f = in_flight(m, before);
    const double plain = stage_memory_bytes(footprint(k, j, m, {}), f);
    return recompute_->choose(k, j, (plain + recompute_->transient(k, j) * item_share() - memory_) / f);
  }
  bool recomputes() const { return recompute_ != nullptr; }
  bool recompute_per_stage() const { return recompute_ && recompute_->chosen_per_stage(); }
  // Whether a stage's memory depends on the rank it sits on beyond its
  // in-flight count (a flushing schedule's held microbatches): the solvers
  // then ask value() where it sits.
  bool held_by_rank() const { return flushing_ && !flushing_->held_minibatches.empty(); }
  double memory(int k, int j, int m, int before) const {
    const std::optional<Recomputation> r = recomputation(k, j, m, before);
    return stage_memory_bytes(footprint(k, j, m, r ? *r : Recomputation{}), in_flight(m, before));
  }
  bool memory_limited() const { return memory_ > 0; }
  // A stage's value depends on where it sits (memory, or the group's entry link).
  bool position_dependent() const { return memory_limited() || level_.entry_bandwidth != level_.bandwidth; }
  bool fits(int k, int j, int m, int before) const { return !memory_limited() || memory(k, j, m, before) <= memory_; }
  // A stage on m units is in the plan family (uniform replication: every
  // stage has exactly stage_replicas workers).
  bool uniform() const { return stage_replicas_ != 0; }
  // Units a uniform stage takes at this level (0: any, -1: none fits).
  int uniform_units() const {
    if (!stage_replicas_) return 0;
    return stage_replicas_ % level_.unit_workers == 0 ? stage_replicas_ / level_.unit_workers : -1;
  }
  bool allowed(int m) const { return stage_replicas_ == 0 || m * level_.unit_workers == stage_replicas_; }
  // The item's contribution to the bottleneck; kInf when it does not fit.
  double value(int k, int j, int m, int before) const {
    if (before + m > level_.units) return kInf;  // (searches may ask past the group's end)
    if (m == 1 && tiles_) return tile(k, j, before);
    if (!allowed(m)) return kInf;
    if (!recompute_) {
      if (memory_limited() && memory(k, j, m, before) > memory_) return kInf;
      return stage_time(k, j, m, before == 0);
    }
    const std::optional<Recomputation> r = recomputation(k, j, m, before);
    if (!r) return kInf;
    if (memory_limited() && stage_memory_bytes(footprint(k, j, m, *r), in_flight(m, before)) > memory_) return kInf;
    return stage_time(k, j, m, before == 0, r->forward_s);
  }
  // A stage's time wherever it sits, memory aside (first: entered over the
  // group's entry link), with its fixed recomputation (full, every-other)
  // or the given extra forward.
  double stage_time(int k, int j, int m, bool first) const {
    return stage_time(k, j, m, first, fixed_recomputation(k, j).forward_s);
  }
  double stage_time(int k, int j, int m, bool first, double recompute_s) const {
    const int r = m * level_.unit_workers;
    double t = std::max(raw_compute(k, j) + recompute_s, sync(k, j, r)) / r;
    return std::max(t, transfer(k, m, first ? 0 : 1));
  }
  // The most minibatches in flight a stage on m units can hold in memory.
  int max_in_flight(int k, int j, int m) const {
    if (!memory_limited()) return std::numeric_limits<int>::max();
    const StageFootprint s = footprint(k, j, m);
    // A flushing schedule holds at most one minibatch wherever the stage sits.
    if (weight_versions_ > 0) return stage_memory_bytes(s, 1) <= memory_ ? std::numeric_limits<int>::max() : 0;
    // (held_by_rank: value() checks the stage where it sits instead.)
    // stage_memory_bytes grows linearly with in-flight: solve, then settle rounding.
    const double fixed = stage_memory_bytes(s, 0), per = stage_memory_bytes(s, 1) - fixed;
    int f = int(std::min(1e9, std::max(0.0, std::floor((memory_ - fixed) / std::max(per, 1e-300)))));
    while (f > 0 && stage_memory_bytes(s, f) > memory_) --f;
    while (f < 1000000000 && stage_memory_bytes(s, f + 1) <= memory_) ++f;
    return f;
  }
  // Minibatches' worth of activations the stage holds (1F1B-RR: a whole
  // count; a flushing schedule: its held microbatches' share, one minibatch
  // unless PlannerOptions::held_minibatches says).
  double in_flight(int m, int before) const {
    if (flushing_) return flushing_->held_at(first_rank(before));
    return in_flight_1f1b_rr(total_workers_, first_rank(before), m * level_.unit_workers);
  }
  bool has_tiles() const { return tiles_ != nullptr; }
  const StateSpace& space() const { return s_; }
  int units() const { return level_.units; }
  const Level& level() const { return level_; }
  int first_rank(int before) const { return level_.base + before * level_.unit_workers; }

 private:
  double tile(int k, int j, int before) const {
    if (!memory_limited()) return (before == 0 ? *entry_tile_ : *inner_tile_)[size_t(j) * s_.size() + k];
    const int entry = before == 0 ? level_.entry_level : level_.index;
    return tiles_->get(entry, first_rank(before))[size_t(j) * s_.size() + k];
  }
  const StateSpace& s_;
  Level level_;
  int total_workers_;
  double memory_;
  const TileTables* tiles_;
  const std::vector<double>* entry_tile_ = nullptr;
  const std::vector<double>* inner_tile_ = nullptr;
  const int stage_replicas_;
  const RecomputeChoices* recompute_;
  const int weight_versions_;  // PlannerOptions::weight_versions
  const PlannerOptions* flushing_;  // its held_minibatches and item_share (nullptr: 1F1B-RR's model)
  double item_share() const { return flushing_ ? flushing_->item_share : 1.0; }
  Recomputation fixed_recomputation(int k, int j) const {
    return recompute_ && !recompute_->chosen_per_stage() ? recompute_->fixed(k, j) : Recomputation{};
  }
};

template <class F>
void for_each_nested(const StateSpace& s, int j, F&& f) {
  if (s.all_earlier_nest()) {
    for (int k = j - 1; k >= 0; --k) f(k);
  } else {
    for (int k : s.nested_in[j]) f(k);
  }
}

struct LevelResult {
  double time = kInf;
  std::vector<LevelStage> stages;
};

// The slowest item of a level's plan.
inline double bottleneck(const StageCosts& costs, const std::vector<LevelStage>& stages) {
  double worst = 0;
  int before = 0;
  for (const auto& st : stages) {
    worst = std::max(worst, costs.value(st.from, st.to, st.units, before));
    before += st.units;
  }
  return worst;
}

// A first bracket (lo, hi] of the optimal bottleneck, hi feasible: every
// stage needs compute/m <= tau, so tau >= total compute / units; doubled
// until feasible. False when nothing is (an inner level can leave the whole
// range infeasible on one unit, or memory rules every plan out).
template <class Feasible>
bool bracket(const StageCosts& costs, double& lo, double& hi, Feasible&& feasible) {
  const int last = costs.space().size() - 1;
  lo = 0, hi = costs.compute(0, last) / costs.units();
  if (!(hi > 0) || !std::isfinite(hi)) hi = 1e-12;
  while (!feasible(hi)) {
    lo = hi;
    hi *= 2;
    if (hi > 1e30) return false;
  }
  return true;
}

// The smallest double in (lo, hi] for which feasible() holds, given that
// it holds at hi: bisection on the bit patterns (non-negative doubles
// order like their bits), so the answer is exact.
template <class Feasible>
double smallest_feasible(double lo, double hi, Feasible&& feasible) {
  auto bits = [](double d) {
    uint64_t b;
    std::memcpy(&b, &d, 8);
    return b;
  };
  uint64_t lo_bits = bits(lo), hi_bits = bits(hi);
  while (hi_bits > lo_bits + 1) {
    const uint64_t mid = lo_bits + (hi_bits - lo_bits) / 2;
    double d;
    std::memcpy(&d, &mid, 8);
    (feasible(d) ? hi_bits : lo_bits) = mid;
  }
  double tau;
  std::memcpy(&tau, &hi_bits, 8);
  return tau;
}

// The table DP A(j, m) of docs/design.md §5 over states: the best bottleneck of
// the states after `first` up to j on exactly m units.
class TableDP {
 public:
  // States after `last` are not needed (-1: all).
  TableDP(const StageCosts& costs, int first, bool straight, int last = -1);
  // Units the optimum up to j uses: all of them, or the best count with `fewer`.
  int best_units(int j, bool fewer) const {
    int best = M_;
    if (fewer)
      for (int m = 1; m <= M_; ++m)
        if (at(j, m).time < at(j, best).time) best = m;
    return best;
  }
  double time(int j, bool fewer) const { return at(j, best_units(j, fewer)).time; }
  LevelResult result(int j, bool fewer) const;

 private:
  struct Cell {
    double time = kInf;
    int k = -1, mp = 0;
  };
  Cell& at(int j, int m) { return a_[size_t(j) * (M_ + 1) + m]; }
  const Cell& at(int j, int m) const { return a_[size_t(j) * (M_ + 1) + m]; }
  const StageCosts& costs_;
  const StateSpace& s_;
  const int n_, M_, first_;
  std::vector<Cell> a_;
  std::vector<double> value_, later_;  // first stage of the group, later ones
  std::vector<int> fits_;              // most in-flight minibatches that fit
};

// The solvers of one level (planner/README.md), each exact over its case.
LevelResult solve_table(const StageCosts& costs, bool straight, bool fewer);
LevelResult solve_parametric(const StageCosts& costs, bool straight, bool fewer);
LevelResult solve_memory_limited(const StageCosts& costs, bool straight);
// The optimum of every range (k, j] on one unit (level 0, prefix state
// spaces); out[j * n + k].
void all_ranges_on_one_unit(const StageCosts& costs, bool straight, bool fewer, std::vector<double>& out);

}  // namespace pd::paper
