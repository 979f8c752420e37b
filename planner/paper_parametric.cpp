// The parametric search of one level: the smallest feasible bottleneck.
#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "planner/paper_solvers.h"

namespace pd::paper {
namespace {

// Parametric search on the bottleneck τ: a stage's time is non-increasing
// in its replica count from 2 replicas on (compute/m and the ring sync
// 4(m-1)P/(m²B) both fall), so "can every stage be ≤ τ with the workers we
// have" is a shortest-path style DP on the fewest workers, and the optimum
// is the smallest τ (a double) for which it holds.
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

}  // namespace

LevelResult solve_parametric(const StageCosts& costs, bool straight, bool fewer) {
  return ParametricSolver(costs, straight, fewer).solve();
}

}  // namespace pd::paper
