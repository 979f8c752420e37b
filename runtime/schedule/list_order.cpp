#include "runtime/schedule/list_order.h"

#include <limits>
#include <stdexcept>

#include "core/error.h"
#include "runtime/schedule/schedule.h"

namespace pd {

std::vector<std::vector<OrderEntry>> list_order(const Schedule& sch, const ListOrderRules& rules) {
  const int S = sch.stages(), W = sch.workers(), C = sch.chunks(), M = sch.options().microbatches;
  constexpr int64_t kNever = std::numeric_limits<int64_t>::max();
  // Per stage: when each microbatch's F and B end, and the next of each to run.
  std::vector<std::vector<int64_t>> f_end(static_cast<size_t>(S), std::vector<int64_t>(static_cast<size_t>(M), kNever));
  std::vector<std::vector<int64_t>> b_end = f_end;
  std::vector<int> next_f(static_cast<size_t>(S), 0), next_b(next_f), next_w(next_f);
  std::vector<int> held(static_cast<size_t>(W), 0);
  std::vector<std::vector<OrderEntry>> order(static_cast<size_t>(W));
  // A worker's stages in chunk order, and its last (highest) one.
  auto stage_of = [&](int w, int c) { return C > 1 ? sch.stage_of(w, c) : sch.stage_of(w); };
  auto last_stage = [&](int w) {
    int last = -1;
    for (int c = 0; c < C; ++c) last = std::max(last, stage_of(w, c));
    return last;
  };
  const size_t total = static_cast<size_t>(S) * M * (rules.split_backward ? 3 : 2);
  size_t done = 0;
  struct Pick {
    ActionKind kind;
    int stage = -1, microbatch = 0, chunk = 0;
  };
  for (int64_t t = 0; done < total; ++t) {
    std::vector<Pick> picks(static_cast<size_t>(W));
    bool any = false;
    for (int w = 0; w < W; ++w) {
      Pick b, f, wt;
      for (int c = 0; c < C; ++c) {
        const int s = stage_of(w, c);
        const size_t su = static_cast<size_t>(s);
        if (const int j = next_b[su];
            j < M && f_end[su][static_cast<size_t>(j)] <= t &&
            (s == S - 1 || b_end[su + 1][static_cast<size_t>(j)] <= t) &&
            (b.stage < 0 || j < b.microbatch || (j == b.microbatch && s > b.stage)))
          b = {ActionKind::Backward, s, j, c};
        const int room = rules.cap(w) - (s == last_stage(w) ? 0 : 1);
        if (const int j = next_f[su];
            j < M && (s == 0 || f_end[su - 1][static_cast<size_t>(j)] <= t) && held[static_cast<size_t>(w)] < room &&
            (f.stage < 0 || s > f.stage))
          f = {ActionKind::Forward, s, j, c};
        if (const int j = next_w[su];
            rules.split_backward && j < next_b[su] && b_end[su][static_cast<size_t>(j)] <= t &&
            (wt.stage < 0 || j < wt.microbatch || (j == wt.microbatch && s > wt.stage)))
          wt = {ActionKind::BackwardWeight, s, j, c};
      }
      Pick& p = picks[static_cast<size_t>(w)];
      p = b.stage >= 0 ? b : f.stage >= 0 ? f : wt;
      any = any || p.stage >= 0;
    }
    if (!any) throw std::logic_error(cat("list_order stalls at step ", t, " (", done, " of ", total, " actions)"));
    for (int w = 0; w < W; ++w) {
      const Pick& p = picks[static_cast<size_t>(w)];
      if (p.stage < 0) continue;
      const size_t su = static_cast<size_t>(p.stage), j = static_cast<size_t>(p.microbatch);
      order[static_cast<size_t>(w)].push_back({p.kind, p.microbatch, p.chunk});
      ++done;
      if (p.kind == ActionKind::Forward) {
        f_end[su][j] = t + 1;
        ++next_f[su];
        ++held[static_cast<size_t>(w)];
      } else if (p.kind == ActionKind::Backward) {
        b_end[su][j] = t + 1;
        ++next_b[su];
        if (!rules.split_backward) --held[static_cast<size_t>(w)];
      } else {
        ++next_w[su];
        --held[static_cast<size_t>(w)];
      }
    }
  }
  return order;
}

}  // namespace pd
