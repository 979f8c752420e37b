// A flat level with a memory limit: worker-count sets, bisected on τ.
#include <algorithm>

#include "core/error.h"
#include "planner/paper_solvers.h"

namespace pd::paper {
namespace {

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

}  // namespace

LevelResult solve_memory_limited(const StageCosts& costs, bool straight) {
  return MemoryLimitedSolver(costs, straight).solve();
}

}  // namespace pd::paper
