#include "planner/paper_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>

#include "core/error.h"
#include "planner/stage_memory.h"
#include "planner/state_space.h"

namespace pd {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr int kMaxDownSets = 2000;

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
             int stage_replicas)
      : s_(s), level_(level), total_workers_(total_workers), memory_(memory), tiles_(tiles),
        stage_replicas_(stage_replicas) {
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
  StageFootprint footprint(int k, int j, int m) const {
    return {s_.parameters[j] - s_.parameters[k], s_.optimizer_state[j] - s_.optimizer_state[k],
            s_.activations[j] - s_.activations[k], s_.cut_bytes[j], m * level_.unit_workers, s_.workspace(k, j)};
  }
  double memory(int k, int j, int m, int before) const {
    return stage_memory_bytes(footprint(k, j, m), in_flight(m, before));
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
    if (memory_limited() && memory(k, j, m, before) > memory_) return kInf;
    return stage_time(k, j, m, before == 0);
  }
  // A stage's time wherever it sits, memory aside (first: entered over the
  // group's entry link).
  double stage_time(int k, int j, int m, bool first) const {
    const int r = m * level_.unit_workers;
    double t = std::max(raw_compute(k, j), sync(k, j, r)) / r;
    return std::max(t, transfer(k, m, first ? 0 : 1));
  }
  // The most minibatches in flight a stage on m units can hold in memory.
  int max_in_flight(int k, int j, int m) const {
    if (!memory_limited()) return std::numeric_limits<int>::max();
    const StageFootprint s = footprint(k, j, m);
    // stage_memory_bytes grows linearly with in-flight: solve, then settle rounding.
    const double fixed = stage_memory_bytes(s, 0), per = stage_memory_bytes(s, 1) - fixed;
    int f = int(std::min(1e9, std::max(0.0, std::floor((memory_ - fixed) / std::max(per, 1e-300)))));
    while (f > 0 && stage_memory_bytes(s, f) > memory_) --f;
    while (f < 1000000000 && stage_memory_bytes(s, f + 1) <= memory_) ++f;
    return f;
  }
  int in_flight(int m, int before) const {
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

// The table DP A(j, m) of docs/design.md §5 over states: the best bottleneck of
// the states after `first` up to j on exactly m units.
class TableDP {
 public:
  // States after `last` are not needed (-1: all).
  TableDP(const StageCosts& costs, int first, bool straight, int last = -1)
      : costs_(costs), s_(costs.space()), n_(s_.size()), M_(costs.units()), first_(first),
        a_(size_t(n_) * (M_ + 1)), value_(M_ + 1), later_(M_ + 1), fits_(M_ + 1) {
    at(first, 0).time = 0;
    for (int j = first + 1; j < (last < 0 ? n_ : last + 1); ++j)
      for_each_nested(s_, j, [&](int k) {
        if (k < first) return;
        if (!s_.all_earlier_nest() && k != first && !s_.members[first].subset_of(s_.members[k])) return;
        // Without a memory limit a stage's value does not depend on its
        // position: evaluate it once per replica count.
        const bool shared = !costs_.position_dependent();
        const int max_mp = straight ? 1 : M_;
        if (shared) {
          for (int mp = 1; mp <= max_mp; ++mp) value_[mp] = costs_.value(k, j, mp, 0);
        } else {
          // A stage's time depends on its position only through the entry
          // link (first stage) and memory (in-flight count): tabulate both.
          for (int mp = 1; mp <= max_mp; ++mp) {
            const bool plain = costs_.allowed(mp) && !(mp == 1 && costs_.has_tiles());
            value_[mp] = plain ? costs_.stage_time(k, j, mp, true) : kInf;
            later_[mp] = plain ? costs_.stage_time(k, j, mp, false) : kInf;
            fits_[mp] = plain ? costs_.max_in_flight(k, j, mp) : 0;
          }
        }
        const Cell* prev_row = &at(k, 0);
        // Uniform replication allows one stage size (and a tile): visit only those.
        const int only = costs_.uniform_units();
        for (int m = 1; m <= M_; ++m) {
          Cell& cell = at(j, m);
          for (int mp = 1; mp <= std::min(m, max_mp); ++mp) {
            if (only > 0 && mp != only && !(mp == 1 && costs_.has_tiles())) {
              if (mp < only) mp = only - 1;  // (the loop's ++ lands on it)
              else break;
              continue;
            }
            double prev = prev_row[m - mp].time;
            if (prev == kInf) continue;
            double v;
            if (shared) v = value_[mp];
            else if (mp == 1 && costs_.has_tiles()) v = costs_.value(k, j, 1, m - 1);
            else if (costs_.in_flight(mp, m - mp) > fits_[mp]) continue;
            else v = m == mp ? value_[mp] : later_[mp];
            double t = std::max(prev, v);
            if (t < cell.time) cell = {t, k, mp};
          }
        }
      });
  }
  // Units the optimum up to j uses: all of them, or the best count with `fewer`.
  int best_units(int j, bool fewer) const {
    int best = M_;
    if (fewer)
      for (int m = 1; m <= M_; ++m)
        if (at(j, m).time < at(j, best).time) best = m;
    return best;
  }
  double time(int j, bool fewer) const { return at(j, best_units(j, fewer)).time; }
  LevelResult result(int j, bool fewer) const {
    LevelResult r;
    int m = best_units(j, fewer);
    r.time = at(j, m).time;
    if (r.time == kInf) return r;
    while (j != first_) {
      const Cell& c = at(j, m);
      r.stages.push_back({c.k, j, c.mp});
      j = c.k, m -= c.mp;
    }
    std::reverse(r.stages.begin(), r.stages.end());
    return r;
  }

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

LevelResult solve_table(const StageCosts& costs, bool straight, bool fewer) {
  return TableDP(costs, 0, straight).result(costs.space().size() - 1, fewer);
}

// Parametric search on the bottleneck τ: a stage's time is non-increasing
// in its replica count from 2 replicas on (compute/m and the ring sync
// 4(m-1)P/(m²B) both fall), so "can every stage be ≤ τ with the workers we
// have" is a shortest-path style DP on the fewest workers, and the optimum
// is the smallest τ (a double) for which it holds.
// The slowest item of a level's plan.
double bottleneck(const StageCosts& costs, const std::vector<LevelStage>& stages) {
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

class ParametricSolver {
 public:
  ParametricSolver(const StageCosts& costs, bool straight, bool fewer)
      : costs_(costs), s_(costs.space()), n_(s_.size()), M_(costs.units()), straight_(straight), fewer_(fewer) {
    for (int k = 0; k < n_; ++k) transfer_one_.push_back(costs_.transfer(k, 1, 1));
  }

  LevelResult solve() {
    LevelResult r;
    double lo = 0, hi = 0;
    if (!bracket(costs_, lo, hi, [this](double t) { return feasible(t); })) return r;
    if (lo == 0) {
      // τ = total/units was feasible already: it is (up to rounding) the
      // optimum; find an infeasible lower end below it.
      if (feasible(0)) {
        hi = 0;
      } else {
        lo = hi / 2;
        while (lo > 1e-300 && feasible(lo)) hi = lo, lo /= 2;
        if (!(lo > 1e-300)) lo = 0;
      }
    }
    if (!costs_.memory_limited() && hi > 0) {
      // Narrow (lo, hi] to a relative width of 1e-9, then finish exactly:
      // the optimum is one stage's value, so among the stage values in
      // (lo, hi] it is the smallest feasible one.
      while (lo > 0 && hi > lo * (1 + 1e-9)) {
        double mid = lo + (hi - lo) / 2;
        if (mid <= lo || mid >= hi) break;
        (feasible(mid) ? hi : lo) = mid;
      }
      std::vector<double> candidates = stage_values_between(lo, hi);
      std::sort(candidates.begin(), candidates.end());
      candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
      size_t a = 0, b = candidates.size();  // answer index in [a, b]; b means hi itself
      while (a < b) {
        size_t mid = a + (b - a) / 2;
        if (feasible(candidates[mid])) b = mid;
        else a = mid + 1;
      }
      if (b < candidates.size()) hi = candidates[b];
    }
    const double tau =
        costs_.memory_limited() ? smallest_feasible(lo, hi, [this](double t) { return feasible(t); }) : hi;
    PD_CHECK(feasible(tau));
    r.stages = reconstruct(tau);
    r.time = bottleneck(costs_, r.stages);
    return r;
  }

 private:

  // Every stage value in (lo, hi] (no memory limit: values do not depend
  // on the workers before a stage, and fall with m from 2 replicas on).
  std::vector<double> stage_values_between(double lo, double hi) const {
    std::vector<double> out;
    for (int j = 1; j < n_; ++j)
      for_each_nested(s_, j, [&](int k) {
        double one = costs_.value(k, j, 1, 0);
        if (one > lo && one <= hi) out.push_back(one);
        if (straight_) return;
        int first = min_replicas(k, j, 0, hi), past = std::min(min_replicas(k, j, 0, lo), M_ + 1);
        for (int m = first; m < past && m <= M_; ++m) {
          double v = costs_.value(k, j, m, 0);
          if (v > lo && v <= hi) out.push_back(v);
        }
      });
    return out;
  }

  // Fewest replicas ≥ 2 that bring stage (k, j] within τ (M_ + 1: none).
  // From 2 replicas on, compute/m, the ring sync 4(m-1)P/(m²·B·u) and the
  // transfer all fall with m, so the answer is the largest of three closed
  // forms, checked (and nudged past rounding) with the exact predicate.
  int min_replicas(int k, int j, int before, double tau) const {
    if (straight_) return M_ + 1;
    double c = costs_.compute(k, j);
    if (c == kInf || tau <= 0) return (tau <= 0 && value_ok(k, j, 2, before, tau)) ? 2 : M_ + 1;
    int m = int(std::min(replica_guess(k, j, c, tau), M_ + 1.0));
    while (m > 2 && value_ok(k, j, m - 1, before, tau)) --m;
    while (m <= M_ && !value_ok(k, j, m, before, tau)) {
      if (costs_.memory_limited()) return doubling_search(k, j, before, tau, m);
      ++m;
    }
    return m;
  }
  // The closed forms of min_replicas, from at least 2: within one of the
  // exact answer (rounding), so guess - 1 is a safe lower bound.
  double replica_guess(int k, int j, double c, double tau) const {
    double q = costs_.sync_coefficient(k, j);  // sync(m)/m = q(m-1)/m²
    double guess = std::max({2.0, std::ceil(c / tau), std::ceil(costs_.transfer_coefficient(k) / tau)});
    if (q > 4 * tau) guess = std::max(guess, std::floor((q + std::sqrt(q * q - 4 * tau * q)) / (2 * tau)));
    return guess;
  }
  int doubling_search(int k, int j, int before, double tau, int bad) const {
    int step = 1, good = -1;
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
    const double inv_tau = 1 / tau;
    for (int j = 1; j < n_; ++j)
      for_each_nested(s_, j, [&](int k) {
        // Without a memory limit a stage's fit does not depend on the
        // workers before it: evaluate it at most once for both flags, and
        // only when an offer could still improve f[.][j].
        const double c = costs_.compute(k, j);
        const bool shared = !costs_.memory_limited();
        int cached_more = -1, cached_one = -1;
        double compute_bound = -1, closed_form_bound = -1;  // per pair, when first needed
        for (int flag = 0; flag < 2; ++flag) {
          int base = f_[flag][k];
          if (base > M_) continue;
          auto offer = [&](int to_flag, int m) {
            if (base + m < f_[to_flag][j]) {
              f_[to_flag][j] = base + m;
              choice_[to_flag][j] = {k, m, flag};
            }
          };
          bool one;
          if (shared && cached_one >= 0) one = cached_one;
          // On one replica there is no sync: the value is max(compute, transfer).
          // (Above level 0 one unit runs a tile: ask for its value.)
          // (Without a memory limit the value is asked at position 0, as
          // it is the same everywhere and is cached for both flags.)
          else one = c <= tau && (shared && costs_.level().index == 0 ? transfer_one_[k] <= tau
                                                                        : value_ok(k, j, 1, shared ? 0 : base, tau)),
               cached_one = one;
          if (one) offer(flag, 1);
          if (straight_) continue;
          // Lower bound on the replicas ≥ 2 a stage needs (closed forms,
          // minus one for rounding): skip the exact count when no offer to
          // flag 1 could improve f[1][j]. A single replica reaches flag 1
          // only when 2 replicas fit too.
          auto cannot_improve = [&](double lb) { return !(base + (one && lb <= 2 ? 1.0 : lb) < f_[1][j]); };
          if (compute_bound < 0)  // compute alone
            compute_bound = c == kInf ? kInf : std::max(2.0, std::ceil(c * inv_tau * (1 - 1e-12)));
          if (cannot_improve(compute_bound)) continue;
          if (closed_form_bound < 0) closed_form_bound = std::max(compute_bound, replica_guess(k, j, c, tau) - 1);
          if (cannot_improve(closed_form_bound)) continue;
          int more;
          if (shared && cached_more >= 0) more = cached_more;
          else more = min_replicas(k, j, shared ? 0 : base, tau), cached_more = more;
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
    const int words = (M_ + 1 + 63) / 64;
    reach_.assign(size_t(n_) * words, 0);
    reach_[0] = 1;
    auto bit = [&](int j, int c) { return reach_[size_t(j) * words + c / 64] >> (c % 64) & 1; };
    for (int j = 1; j < n_; ++j) {
      uint64_t* to = &reach_[size_t(j) * words];
      auto relax = [&](int k) {
        const uint64_t* from = &reach_[size_t(k) * words];
        if (!costs_.memory_limited()) {
          // The stage fits or not whatever its position: shift the whole set.
          if (!value_ok(k, j, 1, 0, tau)) return;
          for (int w = words - 1; w >= 0; --w) to[w] |= from[w] << 1 | (w ? from[w - 1] >> 63 : 0);
        } else {
          for (int c = 0; c < M_; ++c)
            if (bit(k, c) && value_ok(k, j, 1, c, tau)) to[(c + 1) / 64] |= uint64_t(1) << ((c + 1) % 64);
        }
      };
      if (s_.all_earlier_nest()) {
        // One unit needs compute per worker ≤ τ (a tile's time is at least
        // that too), and that only grows as k falls.
        for (int k = j - 1; k >= 0 && costs_.compute(k, j) <= tau; --k) relax(k);
      } else {
        for (int k : s_.nested_in[j]) relax(k);
      }
      // Stage counts above M_ are of no use; keep the top word clean.
      if ((M_ + 1) % 64) to[words - 1] &= (uint64_t(1) << ((M_ + 1) % 64)) - 1;
    }
    return bit(n_ - 1, M_);
  }
  bool reach(int j, int c) const {
    const int words = (M_ + 1 + 63) / 64;
    return reach_[size_t(j) * words + c / 64] >> (c % 64) & 1;
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
          if (pick < 0 && reach(k, c - 1) && value_ok(k, j, 1, c - 1, tau)) pick = k;
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
  std::vector<uint64_t> reach_;
  std::vector<double> transfer_one_;  // transfer(k, 1)
};

// One level of workers (a flat topology) with a memory limit, every worker
// used: a stage of m replicas with `after` workers behind it holds
// ceil(after/m) + 1 minibatches, so its fit depends on the workers after it
// only. Right to left, the worker counts a suffix of states can use form a
// set: what one more stage of m >= 2 replicas adds is an up-closed range
// (more replicas only help it, and no later stage sees them), what a
// single replica adds is that set shifted by one, masked by the in-flight
// count the stage fits. The sets are bitsets; "every stage <= tau" is
// feasible when the whole model can use exactly M workers, and tau is
// bisected on its bit pattern, as for the parametric search. Near-linear in
// workers (pairs x M/64 words per test), where the table DP is quadratic.
class MemoryLimitedSolver {
 public:
  MemoryLimitedSolver(const StageCosts& costs, bool straight)
      : costs_(costs), s_(costs.space()), n_(s_.size()), M_(costs.units()), words_((M_ + 1 + 63) / 64),
        straight_(straight) {}

  LevelResult solve() {
    LevelResult r;
    double lo = 0, hi = 0;
    if (!bracket(costs_, lo, hi, [this](double t) { return feasible(t); })) return r;
    const double tau = smallest_feasible(lo, hi, [this](double t) { return feasible(t); });
    r.stages = reconstruct(tau);
    r.time = bottleneck(costs_, r.stages);
    return r;
  }

 private:
  // The stage (k, j] on m replicas with `after` workers behind it.
  bool ok(int k, int j, int m, int after, double tau) const {
    const int before = M_ - after - m;
    return before >= 0 && costs_.value(k, j, m, before) <= tau;
  }
  // Fewest replicas >= 2 that bring the stage within tau (M_ + 1: none).
  int fewest_replicas(int k, int j, int after, double tau) const {
    int hi = M_ - after;
    if (straight_ || hi < 2 || !ok(k, j, hi, after, tau)) return M_ + 1;
    int lo = 1;  // not ok (or 1: below the range)
    while (hi - lo > 1) {
      const int mid = lo + (hi - lo) / 2;
      (ok(k, j, mid, after, tau) ? hi : lo) = mid;
    }
    return hi;
  }
  uint64_t* set(int j) { return &sets_[size_t(j) * words_]; }
  bool has(int j, int count) const { return sets_[size_t(j) * words_ + count / 64] >> (count % 64) & 1; }
  int lowest(int j) const {
    for (int w = 0; w < words_; ++w)
      if (const uint64_t x = sets_[size_t(j) * words_ + w]) return w * 64 + __builtin_ctzll(x);
    return M_ + 1;
  }
  void add_range(int j, int from) {  // counts from..M_
    uint64_t* a = set(j);
    for (int c = from; c <= M_; ++c) {
      if (c % 64 == 0 && c + 64 <= M_ + 1) {
        a[c / 64] = ~uint64_t(0);
        c += 63;
      } else {
        a[c / 64] |= uint64_t(1) << (c % 64);
      }
    }
  }

  // sets_[j]: the worker counts the states after j can use, every stage <= tau.
  bool feasible(double tau) {
    sets_.assign(size_t(n_) * words_, 0);
    up_from_.assign(n_, M_ + 1);
    set(n_ - 1)[0] = 1;
    for (int j = n_ - 1; j >= 1; --j) {
      if (up_from_[j] <= M_) add_range(j, up_from_[j]);
      const int low = lowest(j);
      if (low > M_) continue;
      const uint64_t* from = set(j);
      for_each_nested(s_, j, [&](int k) {
        // One replica: needs stage time <= tau and in-flight (after + 1) within memory.
        if (costs_.allowed(1) && costs_.stage_time(k, j, 1, false) <= tau) {
          const int most_after = std::min(M_ - 1, costs_.max_in_flight(k, j, 1) - 1);
          if (most_after >= 0) {
            uint64_t* to = set(k);
            const int last_word = most_after / 64;
            for (int w = last_word; w >= 0; --w) {
              uint64_t x = from[w];
              if (w == last_word && most_after % 64 != 63) x &= (uint64_t(2) << (most_after % 64)) - 1;
              to[w] |= x << 1;
              if (w + 1 < words_) to[w + 1] |= x >> 63;
            }
          }
        }
        // Two or more: from the fewest workers after, every count above.
        const int m = fewest_replicas(k, j, low, tau);
        if (m <= M_) up_from_[k] = std::min(up_from_[k], low + m);
      });
    }
    if (up_from_[0] <= M_) add_range(0, up_from_[0]);
    return has(0, M_);
  }

  std::vector<LevelStage> reconstruct(double tau) {
    PD_CHECK(feasible(tau));
    std::vector<LevelStage> out;
    int target = M_;
    for (int k = 0; k != n_ - 1;) {
      int next = -1, units = 0;
      // The states containing k, largest first (any that works will do).
      for (int j = n_ - 1; j > k && next < 0; --j) {
        bool nested = s_.all_earlier_nest();
        if (!nested)
          for (int x : s_.nested_in[j]) nested |= x == k;
        if (!nested) continue;
        if (target >= 1 && has(j, target - 1) && ok(k, j, 1, target - 1, tau)) next = j, units = 1;
        const int low = lowest(j);
        if (next < 0 && low <= target - 2 && !straight_ && ok(k, j, target - low, low, tau))
          next = j, units = target - low;
      }
      PD_CHECK(next >= 0, "memory-limited search lost its way at state ", k);
      out.push_back({k, next, units});
      target -= units;
      k = next;
    }
    return out;
  }

  const StageCosts& costs_;
  const StateSpace& s_;
  const int n_, M_, words_;
  const bool straight_;
  std::vector<uint64_t> sets_;
  std::vector<int> up_from_;
};

LevelResult solve_level(const StageCosts& costs, bool straight, bool fewer, PaperAlgorithm algorithm) {
  // (The parametric search needs stage times that fall with replicas.)
  if (costs.uniform()) algorithm = PaperAlgorithm::table;
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
    return MemoryLimitedSolver(costs, straight).solve();
  if (table) return solve_table(costs, straight, fewer);
  return ParametricSolver(costs, straight, fewer).solve();
}

}  // namespace

namespace {

// The optimal time of every range (k, j] on one unit, for prefix state
// spaces at level 0 (compute is a prefix sum; with a memory limit a stage
// that does not fit is worth kInf, which the bounds below still bound). It
// is the table DP A_k(x, m) of every start row k (TableDP's values, with the
// workers before a stage counted from k), with the split loop of each
// cell restricted to the splits that can still beat the best found so far:
// a split at y on mp replicas costs max(A_k(y, r), value(y, x, mp)) with
// r = m - mp, where value ≥ max(C(y, x), sync)/mp (falls as y grows: the
// stage's compute and parameters shrink) and A_k(y, r) ≥
// C(k, y)/r (a max of c_i/m_i is at least Σc_i/Σm_i; grows with y). So the
// splits worth evaluating form one interval of y around the balance point
// C(k, y) ≈ C(k, x)·r/m; scanning outwards from it until each bound reaches
// the incumbent visits exactly the splits that could improve it. The result
// is the same minimum as the full table DP (every pruned split is provably
// no better), usually after a handful of splits per cell instead of x - k.
// Output layout: out[j * n + k].
void all_ranges_on_one_unit(const StageCosts& costs, bool straight, bool fewer, std::vector<double>& out) {
  const StateSpace& s = costs.space();
  const int n = s.size(), M = costs.units(), max_mp = straight ? 1 : M;
  const double* compute = s.compute.data();
  // A_k(y, r) is a max over stages of rounded c_i/m_i: allow for rounding.
  constexpr double kBoundSlack = 1 - 1e-12;
  std::vector<double> a(size_t(M + 1) * n);      // [m][x] = A_k(x, m) for the current row k
  std::vector<int> balance(size_t(M + 1) * (M + 1));  // [m][r]: balance point, rises with x
  for (int k = 0; k + 1 < n; ++k) {
    std::fill(a.begin(), a.end(), kInf);
    a[k] = 0;
    std::fill(balance.begin(), balance.end(), k + 1);
    for (int x = k + 1; x < n; ++x) {
      const double total = compute[x] - compute[k];
      double best_any = kInf;
      for (int m = 1; m <= M; ++m) {
        double best = m <= max_mp ? costs.value(k, x, m, 0) : kInf;  // one stage
        for (int mp = 1; mp <= std::min(m - 1, max_mp); ++mp) {
          if (!costs.allowed(mp)) continue;
          const int r = m - mp;
          const double* prev = &a[size_t(r) * n];
          // Largest y < x with C(k, y) ≤ C(k, x)·r/m (at least k + 1).
          int& y0 = balance[size_t(m) * (M + 1) + r];
          const double target = total * r / m;
          while (y0 + 1 < x && compute[y0 + 1] - compute[k] <= target) ++y0;
          if (y0 >= x) continue;  // x = k + 1: no split inside the range
          for (int y = y0; y > k; --y) {
            // value(y, x, mp) without its transfer term grows as y falls.
            if ((compute[x] - compute[y]) / mp >= best) break;
            if (prev[y] >= best) continue;
            const double stage = std::max(compute[x] - compute[y], costs.sync(y, x, mp)) / mp;
            if (stage >= best) break;
            if (!costs.fits(y, x, mp, r)) continue;
            double t = std::max(prev[y], std::max(stage, costs.transfer(y, mp, r)));
            if (t < best) best = t;
          }
          for (int y = y0 + 1; y < x; ++y) {
            if ((compute[y] - compute[k]) / r * kBoundSlack >= best) break;
            if (prev[y] >= best) continue;
            double t = std::max(prev[y], costs.value(y, x, mp, r));
            if (t < best) best = t;
          }
        }
        a[size_t(m) * n + x] = best;
        best_any = std::min(best_any, best);
      }
      out[size_t(x) * n + k] = fewer ? best_any : a[size_t(M) * n + x];
    }
  }
}

}  // namespace

namespace {

// The level-aligned hierarchy (planner/README.md): the tiles of every
// inner level, solved innermost first; the top level's optimum; and its
// expansion into worker-level stages.
class AlignedHierarchy {
 public:
  AlignedHierarchy(const StateSpace& space, const Topology& topology, double memory, const PlannerOptions& options)
      : space_(space), memory_(memory), straight_(options.straight), fewer_(options.fewer_workers),
        total_workers_(topology.total_workers()), stage_replicas_(options.stage_replicas) {
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
    return StageCosts(space_, l, total_workers_, memory_, level > 0 ? &tiles_[level - 1] : nullptr, stage_replicas_);
  }
  // The same group with no memory limit (its tiles must be the unlimited ones).
  StageCosts unlimited_costs(int level, int entry_level, const TileTables* tiles) const {
    Level l{level, units_[level], unit_workers_[level], bandwidth_[level], entry_level, bandwidth_[entry_level], 0};
    return StageCosts(space_, l, total_workers_, 0, tiles, stage_replicas_);
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
  const double memory_;
  const bool straight_, fewer_;
  const int total_workers_;
  const int stage_replicas_;
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
      {s.parameters[last], s.optimizer_state[last], s.activations[last], 0, replicas, s.workspace(0, last)}, 1);
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

  AlignedHierarchy hierarchy(space, topology, memory, options);
  LevelResult result = hierarchy.solve_top(algorithm);
  if (result.time == kInf) throw NoFeasiblePlan("no pipeline fits the memory limit (paper cost model)");
  hierarchy.expand(hierarchy.levels() - 1, result.stages, 0, hierarchy.levels() - 1, out.stages);
  out.time_per_minibatch_s = result.time;
  return out;
}

}  // namespace pd
