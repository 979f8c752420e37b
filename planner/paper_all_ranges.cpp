// Every range's optimum on one unit at level 0 of a prefix state space.
#include <algorithm>

#include "planner/paper_solvers.h"

namespace pd::paper {

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
            double t = std::max(prev[y], costs.recomputes() ? costs.value(y, x, mp, r)
                                                            : std::max(stage, costs.transfer(y, mp, r)));
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


}  // namespace pd::paper
