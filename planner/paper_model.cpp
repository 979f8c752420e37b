// The paper cost model: the level-aligned hierarchy (tiles of inner levels
// solved innermost first), which solver each level uses, and plan_paper.
#include "planner/paper_model.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.h"
#include "planner/paper_solvers.h"
#include "planner/stage_memory.h"
#include "planner/state_space.h"

namespace pd {
namespace {

using namespace paper;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kMaxDownSets = 2000;

LevelResult solve_level(const StageCosts& costs, bool straight, bool fewer, PaperAlgorithm algorithm) {
  // (The parametric search needs stage times that fall with replicas.)
  if (costs.uniform()) algorithm = PaperAlgorithm::table;
  // (Recomputation makes a stage's time depend on its memory: the table DP
  // asks every stage where it sits.)
  if (costs.recomputes() || costs.held_by_rank()) algorithm = PaperAlgorithm::table;
  const StateSpace& s = costs.space();
  double pairs = s.all_earlier_nest() ? 0.5 * s.size() * s.size() : 0;
  if (!s.all_earlier_nest())
    for (const auto& v : s.nested_in) pairs += double(v.size());
  const double units = costs.units();
  bool table = algorithm == PaperAlgorithm::table ||
               (algorithm == PaperAlgorithm::automatic &&
                (costs.memory_limited() || pairs * units * (straight ? 1 : units) / 2 <= 2e7));
  // Every worker of a flat topology under a memory limit: near-linear in workers.
  const bool memory_flat = costs.memory_limited() && !costs.has_tiles() && !fewer;
  if (memory_flat && (algorithm == PaperAlgorithm::parametric ||
                      (algorithm == PaperAlgorithm::automatic && pairs * units * units / 2 > 2e7)))
    return solve_memory_limited(costs, straight);
  if (table) return solve_table(costs, straight, fewer);
  return solve_parametric(costs, straight, fewer);
}

// The level-aligned hierarchy (planner/README.md): the tiles of every
// inner level, solved innermost first; the top level's optimum; and its
// expansion into worker-level stages.
class AlignedHierarchy {
 public:
  AlignedHierarchy(const StateSpace& space, const Topology& topology, double memory, const PlannerOptions& options,
                   const RecomputeChoices& recompute)
      : space_(space), recompute_(recompute), memory_(memory), straight_(options.straight), fewer_(options.fewer_workers),
        total_workers_(topology.total_workers()), stage_replicas_(options.stage_replicas),
        options_(options) {
    for (int l = 0, below = 1; l < int(topology.levels.size()); ++l) {
      units_.push_back(topology.levels[l].count);
      bandwidth_.push_back(topology.levels[l].bandwidth_GBps * 1e9);
      unit_workers_.push_back(below);
      below *= topology.levels[l].count;
    }
    tiles_.resize(units_.size());
    for (int l = 0; l + 1 < levels(); ++l) build_tiles(l);
  }

  LevelResult solve_top(PaperAlgorithm algorithm) const {
    return solve_level(costs(levels() - 1, levels() - 1, 0), straight_, fewer_, algorithm);
  }

  // Worker-level stages of the top level's items: a stage on u units takes
  // their workers; a tile is replaced by its own optimal sub-pipeline.
  void expand(int level, const std::vector<LevelStage>& stages, int base, int entry,
              std::vector<PlannedStage>& out) const {
    int before = 0;
    for (const LevelStage& st : stages) {
      const int first = base + before * unit_workers_[level];
      if (level > 0 && st.units == 1) {
        const int tile_entry = before == 0 ? entry : level;
        StageCosts inner = costs(level - 1, tile_entry, first);
        LevelResult r = TableDP(inner, st.from, straight_, st.to).result(st.to, false);
        expand(level - 1, r.stages, first, tile_entry, out);
      } else {
        StageCosts c = costs(level, entry, base);
        const int replicas = st.units * unit_workers_[level];
        PlannedStage p;
        p.nodes = space_.stage_nodes(st.from, st.to);
        for (int r = 0; r < replicas; ++r) p.ranks.push_back(first + r);
        p.sync_s = c.sync(st.from, st.to, replicas);
        p.transfer_s = c.transfer(st.from, st.units, before);
        p.time_s = c.value(st.from, st.to, st.units, before);
        if (const std::optional<Recomputation> r = c.recomputed_nodes(st.from, st.to, st.units, before)) {
          p.recompute_nodes = r->nodes;
          p.recompute_s = r->forward_s;
        }
        out.push_back(std::move(p));
      }
      before += st.units;
    }
  }
  int levels() const { return int(units_.size()); }

 private:
  // One group of `level`, entered over the link of `entry_level`, whose
  // first worker is rank `base`.
  StageCosts costs(int level, int entry_level, int base) const {
    Level l{level, units_[level], unit_workers_[level], bandwidth_[level], entry_level, bandwidth_[entry_level], base};
    return StageCosts(space_, l, total_workers_, memory_, level > 0 ? &tiles_[level - 1] : nullptr, stage_replicas_,
                      &recompute_, &options_);
  }
  // The same group with no memory limit (its tiles must be the unlimited ones).
  StageCosts unlimited_costs(int level, int entry_level, const TileTables* tiles) const {
    Level l{level, units_[level], unit_workers_[level], bandwidth_[level], entry_level, bandwidth_[entry_level], 0};
    return StageCosts(space_, l, total_workers_, 0, tiles, stage_replicas_, &recompute_, &options_);
  }

  // The optimum of every range starting at k, on one group.
  void tile_row(const StageCosts& c, int k, std::vector<double>& out) const {
    const int n = space_.size();
    TableDP dp(c, k, straight_);
    for (int j = k + 1; j < n; ++j) out[size_t(j) * n + k] = dp.time(j, false);
  }
  std::vector<double> tile_table(const StageCosts& c, int level) const {
    const int n = space_.size();
    std::vector<double> out(size_t(n) * n, kInf);
    if (level == 0 && space_.all_earlier_nest()) all_ranges_on_one_unit(c, straight_, false, out);
    else
      for (int k = 0; k + 1 < n; ++k) tile_row(c, k, out);
    return out;
  }

  // Every range's optimum on one group of `level`, for every entry link
  // above it and (memory limit) every position of the group. A tile is no
  // slower further right (fewer minibatches in flight), and never faster
  // than without the limit: once a row of ranges matches the unlimited
  // one, it does at every later position.
  void build_tiles(int level) {
    const int n = space_.size();
    const int group_workers = unit_workers_[level] * units_[level];
    TileTables& t = tiles_[level];
    t.unit_workers = group_workers;
    t.lowest_entry = level + 1;
    t.positions = memory_ > 0 ? total_workers_ / group_workers : 1;
    if (stage_replicas_ && group_workers % stage_replicas_ != 0) {
      // Uniform stages of this size cannot tile a group: no tile exists.
      t.positions = 1;
      for (int entry = level + 1; entry < levels(); ++entry) t.table.emplace_back(size_t(n) * n, kInf);
      unlimited_tiles_.resize(levels());
      unlimited_tiles_[level] = t;
      return;
    }
    if (memory_ > 0) {
      unlimited_tiles_.resize(levels());
      TileTables& u = unlimited_tiles_[level];
      u.unit_workers = group_workers, u.lowest_entry = level + 1, u.positions = 1;
      for (int entry = level + 1; entry < levels(); ++entry)
        u.table.push_back(tile_table(unlimited_costs(level, entry, level > 0 ? &unlimited_tiles_[level - 1] : nullptr), level));
    }
    for (int entry = level + 1; entry < levels(); ++entry) {
      for (int position = 0; position < t.positions; ++position) {
        StageCosts c = costs(level, entry, position * group_workers);
        if (t.positions == 1 || (level == 0 && space_.all_earlier_nest())) {
          t.table.push_back(tile_table(c, level));
          continue;
        }
        const std::vector<double>& unlimited = unlimited_tiles_[level].get(entry, 0);
        const std::vector<double>* left = position > 0 ? &t.table.back() : nullptr;
        std::vector<double> out(size_t(n) * n, kInf);
        for (int k = 0; k + 1 < n; ++k) {
          bool settled = left != nullptr;
          for (int j = k + 1; j < n && settled; ++j) settled = (*left)[size_t(j) * n + k] == unlimited[size_t(j) * n + k];
          if (settled)
            for (int j = k + 1; j < n; ++j) out[size_t(j) * n + k] = unlimited[size_t(j) * n + k];
          else
            tile_row(c, k, out);
        }
        t.table.push_back(std::move(out));
      }
    }
  }

  const StateSpace& space_;
  const RecomputeChoices& recompute_;
  const double memory_;
  const bool straight_, fewer_;
  const int total_workers_;
  const int stage_replicas_;
  const PlannerOptions& options_;  // the flushing memory model (weight_versions, held_minibatches)
  std::vector<int> units_, unit_workers_;
  std::vector<double> bandwidth_;
  std::vector<TileTables> tiles_;  // [l]: groups of level l as units of level l + 1
  std::vector<TileTables> unlimited_tiles_;  // the same without the memory limit
};

// One worker's memory for the whole model on `replicas` workers (in-flight
// 1): the single-worker and data-parallel baselines.
double whole_model_memory(const StateSpace& s, int replicas) {
  const int last = s.size() - 1;
  return stage_memory_bytes(
      {s.parameters[last], s.optimizer_state[last], s.activations[last], replicas, s.workspace(0, last)}, 1);
}

}  // namespace

PlannedPipeline plan_paper(const PlanningGraph& g, const Topology& topology, const PlannerOptions& options,
                           PaperAlgorithm algorithm) {
  // Down-sets nest pairwise far more often than antichain states connect:
  // the DP visits every nested pair, so their number is capped lower here.
  StateSpace space = build_state_space(g, std::min(options.max_antichain_states, kMaxDownSets));
  const int total_workers = topology.total_workers();
  const double memory = double(options.memory_bytes ? options.memory_bytes : topology.worker_memory_bytes);
  const int n = space.size();
  const bool one_fits = !(memory > 0) || whole_model_memory(space, 1) <= memory;
  const bool all_fit = !(memory > 0) || whole_model_memory(space, total_workers) <= memory;
  PlannedPipeline out;
  out.state_space = space.kind;
  out.single_worker_s = one_fits ? space.compute[n - 1] : kNaN;
  // Data parallelism: the whole model on every worker, one ring all-reduce
  // over the slowest link among them.
  std::vector<int> all(total_workers);
  for (int r = 0; r < total_workers; ++r) all[r] = r;
  const double dp_sync = total_workers > 1 ? 4.0 * (total_workers - 1) * space.parameters[n - 1] /
                                                 (total_workers * topology.group_bandwidth(all) * 1e9)
                                           : 0.0;
  out.data_parallel_s = all_fit ? std::max(space.compute[n - 1], dp_sync) / total_workers : kNaN;

  const RecomputeChoices recompute(g, space, options.recompute);
  AlignedHierarchy hierarchy(space, topology, memory, options, recompute);
  LevelResult result = hierarchy.solve_top(algorithm);
  if (result.time == kInf) throw NoFeasiblePlan("no pipeline fits the memory limit (paper cost model)");
  hierarchy.expand(hierarchy.levels() - 1, result.stages, 0, hierarchy.levels() - 1, out.stages);
  out.time_per_minibatch_s = result.time;
  return out;
}

}  // namespace pd
