// The table DP of one level: A(j, m) over states and units.
#include <algorithm>

#include "planner/paper_solvers.h"

namespace pd::paper {

TableDP::TableDP(const StageCosts& costs, int first, bool straight, int last)
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
          else if (costs_.recompute_per_stage() || costs_.held_by_rank())
            v = costs_.value(k, j, mp, m - mp);  // (time, or memory, depends on where it sits)
          else if (costs_.in_flight(mp, m - mp) > fits_[mp]) continue;
          else v = m == mp ? value_[mp] : later_[mp];
          double t = std::max(prev, v);
          if (t < cell.time) cell = {t, k, mp};
        }
      }
    });
}

LevelResult TableDP::result(int j, bool fewer) const {
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

LevelResult solve_table(const StageCosts& costs, bool straight, bool fewer) {
  return TableDP(costs, 0, straight).result(costs.space().size() - 1, fewer);
}

}  // namespace pd::paper
