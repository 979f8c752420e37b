#include "planner/paper_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "planner/state_space.h"

namespace pd {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// One level of the hierarchy: `units` groups (workers at level 0) joined by
// `bandwidth`; each unit holds `unit_workers` workers.
struct Level {
  int units = 1;
  double bandwidth = 1e9;  // bytes/s
  int unit_workers = 1;
};

struct LevelStage {
  int from = 0, to = 0, units = 1;  // states (from, to], replicated on `units`
};

// Stage costs at one level. At level 0 a stage's compute is its layers'
// forward + backward; above, it is the optimal time of the range on one unit
// (the level below), as PipeDream solves hierarchies.
class StageCosts {
 public:
  StageCosts(const StateSpace& s, Level level, int total_workers, double memory, const std::vector<double>* inner)
      : s_(s), level_(level), total_workers_(total_workers), memory_(memory), inner_(inner) {}

  double compute(int k, int j) const {
    return inner_ ? (*inner_)[size_t(k) * s_.size() + j] : s_.compute[j] - s_.compute[k];
  }
  double sync(int k, int j, int m) const {
    // Ring all-reduce of the stage's weights among m replicas; a unit's
    // workers each carry 1/unit_workers of it over the slower link.
    return 4.0 * (m - 1) * (s_.parameters[j] - s_.parameters[k]) / (m * level_.bandwidth) / level_.unit_workers;
  }
  double transfer(int k, int m) const { return 2.0 * s_.cut_bytes[k] / (level_.bandwidth * m); }
  // Minibatches a stage holds at once under 1F1B-RR (DESIGN.md §6).
  int in_flight(int m, int before) const { return (total_workers_ - 1 - before) / m + 1; }
  double memory(int k, int j, int m, int before) const {
    int f = in_flight(m, before);
    double params = s_.parameters[j] - s_.parameters[k];
    return params * (f + 1) + (s_.optimizer_state[j] - s_.optimizer_state[k]) +
           (s_.activations[j] - s_.activations[k]) * f;
  }
  bool memory_limited() const { return memory_ > 0 && !inner_; }
  // The stage's contribution to the bottleneck; kInf when it does not fit.
  double value(int k, int j, int m, int before) const {
    double c = compute(k, j);
    if (c == kInf) return kInf;
    if (memory_limited() && memory(k, j, m, before) > memory_) return kInf;
    double t = std::max(c, sync(k, j, m)) / m;
    return std::max(t, transfer(k, m));
  }
  const StateSpace& space() const { return s_; }
  int units() const { return level_.units; }

 private:
  const StateSpace& s_;
  Level level_;
  int total_workers_;
  double memory_;
  const std::vector<double>* inner_;
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

// The table DP A(j, m) of DESIGN.md §5 over states, exactly m units.
LevelResult solve_table(const StageCosts& costs, int first_state, bool straight, bool fewer) {
  const StateSpace& s = costs.space();
  const int n = s.size(), M = costs.units();
  struct Cell {
    double time = kInf;
    int k = -1, mp = 0;
  };
  std::vector<Cell> a(size_t(n) * (M + 1));
  auto at = [&](int j, int m) -> Cell& { return a[size_t(j) * (M + 1) + m]; };
  at(first_state, 0).time = 0;
  for (int j = first_state + 1; j < n; ++j)
    for_each_nested(s, j, [&](int k) {
      if (k < first_state) return;
      if (!s.all_earlier_nest() && k != first_state && !s.members[first_state].subset_of(s.members[k])) return;
      for (int m = 1; m <= M; ++m)
        for (int mp = 1; mp <= (straight ? 1 : m); ++mp) {
          const Cell& prev = at(k, m - mp);
          if (prev.time == kInf) continue;
          double t = std::max(prev.time, costs.value(k, j, mp, m - mp));
          Cell& cell = at(j, m);
          if (t < cell.time) cell = {t, k, mp};
        }
    });
  LevelResult r;
  int best_m = M;
  if (fewer)
    for (int m = 1; m <= M; ++m)
      if (at(n - 1, m).time < at(n - 1, best_m).time) best_m = m;
  r.time = at(n - 1, best_m).time;
  if (r.time == kInf) return r;
  for (int j = n - 1, m = best_m; j != first_state;) {
    const Cell& c = at(j, m);
    r.stages.push_back({c.k, j, c.mp});
    j = c.k, m -= c.mp;
  }
  std::reverse(r.stages.begin(), r.stages.end());
  return r;
}

// Parametric search on the bottleneck τ: a stage's time is non-increasing
// in its replica count from 2 replicas on (compute/m and the ring sync
// 4(m-1)P/(m²B) both fall), so "can every stage be ≤ τ with the workers we
// have" is a shortest-path style DP on the fewest workers, and the optimum
// is the smallest τ (a double) for which it holds.
class ParametricSolver {
 public:
  ParametricSolver(const StageCosts& costs, bool straight, bool fewer)
      : costs_(costs), s_(costs.space()), n_(s_.size()), M_(costs.units()), straight_(straight), fewer_(fewer) {}

  LevelResult solve() {
    LevelResult r;
    double hi = 1e-9;
    while (!feasible(hi)) {
      hi *= 4;
      if (hi > 1e30) return r;
    }
    double lo = 0;
    if (feasible(lo)) hi = lo;
    // Bisect on the bit patterns: positive doubles order like their bits.
    uint64_t lo_bits = bits(lo), hi_bits = bits(hi);
    while (hi_bits - lo_bits > 1) {
      uint64_t mid = lo_bits + (hi_bits - lo_bits) / 2;
      if (feasible(from_bits(mid))) hi_bits = mid;
      else lo_bits = mid;
    }
    double tau = from_bits(hi_bits);
    PD_CHECK(feasible(tau));
    r.stages = reconstruct(tau);
    r.time = 0;
    int before = 0;
    for (const auto& st : r.stages) {
      r.time = std::max(r.time, costs_.value(st.from, st.to, st.units, before));
      before += st.units;
    }
    return r;
  }

 private:
  static uint64_t bits(double d) {
    uint64_t b;
    std::memcpy(&b, &d, 8);
    return b;
  }
  static double from_bits(uint64_t b) {
    double d;
    std::memcpy(&d, &b, 8);
    return d;
  }

  // Fewest replicas ≥ 2 that bring stage (k, j] within τ (M_ + 1: none).
  int min_replicas(int k, int j, int before, double tau) const {
    if (straight_) return M_ + 1;
    double c = costs_.compute(k, j);
    if (c == kInf) return M_ + 1;
    if (tau <= 0) return value_ok(k, j, 2, before, tau) ? 2 : M_ + 1;
    // Lower bounds from compute/m <= τ and transfer(k, 1)/m <= τ.
    double guess = std::max({2.0, std::ceil(c / tau), std::ceil(costs_.transfer(k, 1) / tau)});
    int m = int(std::min<double>(guess, M_ + 1));
    if (m > M_) return M_ + 1;
    // Walk to the exact boundary; the closed-form guess is a lower bound
    // up to rounding, and the sync term is found by doubling.
    while (m > 2 && value_ok(k, j, m - 1, before, tau)) --m;
    if (value_ok(k, j, m, before, tau)) return m;
    int step = 1, good = -1, bad = m;
    while (true) {
      int probe = bad + step;
      if (probe > M_) {
        if (bad < M_ && value_ok(k, j, M_, before, tau)) good = M_;
        break;
      }
      if (value_ok(k, j, probe, before, tau)) {
        good = probe;
        break;
      }
      bad = probe;
      step *= 2;
    }
    if (good < 0) return M_ + 1;
    while (good - bad > 1) {
      int mid = bad + (good - bad) / 2;
      if (value_ok(k, j, mid, before, tau)) good = mid;
      else bad = mid;
    }
    return good;
  }
  bool value_ok(int k, int j, int m, int before, double tau) const { return costs_.value(k, j, m, before) <= tau; }

  struct Choice {
    int k = -1, m = 0, from_flag = 0;
  };

  // f[flag][j]: fewest units covering states up to j with every stage ≤ τ;
  // flag 1: some stage can absorb any number of extra units.
  bool feasible(double tau) {
    for (int flag = 0; flag < 2; ++flag) {
      f_[flag].assign(n_, M_ + 1);
      choice_[flag].assign(n_, {});
    }
    f_[0][0] = 0;
    for (int j = 1; j < n_; ++j)
      for_each_nested(s_, j, [&](int k) {
        for (int flag = 0; flag < 2; ++flag) {
          int base = f_[flag][k];
          if (base > M_) continue;
          bool one = value_ok(k, j, 1, base, tau);
          int more = min_replicas(k, j, base, tau);
          auto offer = [&](int to_flag, int m) {
            if (base + m < f_[to_flag][j]) {
              f_[to_flag][j] = base + m;
              choice_[to_flag][j] = {k, m, flag};
            }
          };
          if (one) offer(flag, 1);
          if (one && more == 2) offer(1, 1);
          if (more <= M_) offer(1, more);
        }
      });
    const int last = n_ - 1;
    if (fewer_) return std::min(f_[0][last], f_[1][last]) <= M_;
    if (f_[1][last] <= M_) return true;
    return exact_stage_count(tau);
  }

  // Plans with no absorbing stage use one unit per stage: is there one with
  // exactly M_ stages?
  bool exact_stage_count(double tau) {
    if (M_ > n_ - 1) return false;
    reach_.assign(size_t(n_) * (M_ + 1), 0);
    reach_[0] = 1;
    for (int j = 1; j < n_; ++j)
      for_each_nested(s_, j, [&](int k) {
        for (int c = 0; c < M_; ++c)
          if (reach_[size_t(k) * (M_ + 1) + c] && value_ok(k, j, 1, c, tau))
            reach_[size_t(j) * (M_ + 1) + c + 1] = 1;
      });
    return reach_[size_t(n_ - 1) * (M_ + 1) + M_];
  }

  std::vector<LevelStage> reconstruct(double tau) {
    feasible(tau);
    std::vector<LevelStage> out;
    const int last = n_ - 1;
    int flag = fewer_ ? (f_[0][last] <= f_[1][last] ? 0 : 1) : 1;
    if (!fewer_ && f_[1][last] > M_) {
      // Exactly M_ single-unit stages.
      exact_stage_count(tau);
      for (int j = last, c = M_; j != 0; --c) {
        int pick = -1;
        for_each_nested(s_, j, [&](int k) {
          if (pick < 0 && reach_[size_t(k) * (M_ + 1) + c - 1] && value_ok(k, j, 1, c - 1, tau)) pick = k;
        });
        out.push_back({pick, j, 1});
        j = pick;
      }
      std::reverse(out.begin(), out.end());
      return out;
    }
    for (int j = last; j != 0;) {
      Choice c = choice_[flag][j];
      out.push_back({c.k, j, c.m});
      j = c.k, flag = c.from_flag;
    }
    std::reverse(out.begin(), out.end());
    int used = 0;
    for (const auto& st : out) used += st.units;
    if (!fewer_ && used < M_) {
      // Give the spare units to the slowest stage that stays within τ for
      // any count (each extra replica only lowers later stages' in-flight).
      int before = 0, target = -1;
      double slowest = -1;
      for (size_t t = 0; t < out.size(); ++t) {
        auto& st = out[t];
        bool absorbs = st.units >= 2 ? true : min_replicas(st.from, st.to, before, tau) == 2;
        double v = costs_.value(st.from, st.to, st.units, before);
        if (absorbs && v > slowest) slowest = v, target = int(t);
        before += st.units;
      }
      PD_CHECK(target >= 0, "no stage can take the spare workers");
      out[target].units += M_ - used;
    }
    return out;
  }

  const StageCosts& costs_;
  const StateSpace& s_;
  const int n_, M_;
  const bool straight_, fewer_;
  std::vector<int> f_[2];
  std::vector<Choice> choice_[2];
  std::vector<char> reach_;
};

LevelResult solve_level(const StageCosts& costs, bool straight, bool fewer, PaperAlgorithm algorithm) {
  const StateSpace& s = costs.space();
  double pairs = s.all_earlier_nest() ? 0.5 * s.size() * s.size() : 0;
  if (!s.all_earlier_nest())
    for (const auto& v : s.nested_in) pairs += double(v.size());
  const double units = costs.units();
  bool table = algorithm == PaperAlgorithm::table ||
               (algorithm == PaperAlgorithm::automatic &&
                (costs.memory_limited() || pairs * units * (straight ? 1 : units) / 2 <= 2e7));
  if (table) return solve_table(costs, 0, straight, fewer);
  return ParametricSolver(costs, straight, fewer).solve();
}

}  // namespace

PlannedPipeline plan_paper(const PlanningGraph& g, const Topology& topology, const PlannerOptions& options,
                           PaperAlgorithm algorithm) {
  StateSpace space = build_state_space(g, options.max_antichain_states);
  const int total_workers = topology.total_workers();
  const double memory = double(options.memory_bytes ? options.memory_bytes : topology.worker_memory_bytes);
  const int n = space.size();
  const int levels = int(topology.levels.size());
  std::vector<Level> level(levels);
  for (int l = 0, unit = 1; l < levels; ++l) {
    level[l] = {topology.levels[l].count, topology.levels[l].bandwidth_GBps * 1e9, unit};
    unit *= topology.levels[l].count;
  }
  // Inner levels: the optimal time of every nested range on one unit.
  std::vector<double> inner;
  std::vector<std::vector<std::vector<LevelStage>>> inner_layouts(levels);
  for (int l = 0; l + 1 < levels; ++l) {
    std::vector<double> next(size_t(n) * n, kInf);
    inner_layouts[l].assign(size_t(n) * n, {});
    StageCosts costs(space, level[l], level[l].units, memory, l == 0 ? nullptr : &inner);
    for (int k = 0; k < n; ++k) {
      // Sub-problems start at state k: solve with k as the empty state.
      LevelResult r = solve_table(costs, k, options.straight, options.fewer_workers);
      (void)r;
    }
    inner.swap(next);
  }
  (void)inner_layouts;
  StageCosts top(space, level[levels - 1], total_workers, memory, levels > 1 ? &inner : nullptr);
  LevelResult result = solve_level(top, options.straight, options.fewer_workers, algorithm);
  if (result.time == kInf) {
    throw UserError("no pipeline fits");
  }
  PlannedPipeline out;
  out.state_space = space.kind;
  out.time_per_minibatch_s = result.time;
  out.single_worker_s = space.compute[n - 1];
  int before = 0;
  for (const auto& st : result.stages) {
    PlannedStage p;
    p.nodes = space.stage_nodes(st.from, st.to);
    for (int r = 0; r < st.units; ++r) p.ranks.push_back(before + r);
    p.sync_s = top.sync(st.from, st.to, st.units);
    p.transfer_s = top.transfer(st.from, st.units);
    p.time_s = top.value(st.from, st.to, st.units, before);
    p.in_flight = top.in_flight(st.units, before);
    p.memory_bytes = top.memory(st.from, st.to, st.units, before);
    before += st.units;
    out.stages.push_back(std::move(p));
  }
  StageCosts flat(space, level[0], total_workers, 0, nullptr);
  out.data_parallel_s = flat.value(0, n - 1, total_workers, 0);
  return out;
}

}  // namespace pd
