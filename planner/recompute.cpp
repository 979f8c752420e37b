#include "planner/recompute.h"

#include <algorithm>
#include <limits>

#include "core/error.h"
#include "core/text.h"

namespace pd {

const char* to_string(RecomputeMode m) {
  switch (m) {
    case RecomputeMode::none: return "none";
    case RecomputeMode::full: return "full";
    case RecomputeMode::every_other: return "every-other";
    case RecomputeMode::automatic: return "auto";
  }
  return "?";
}

std::optional<RecomputeMode> parse_recompute_mode(std::string_view text) {
  for (RecomputeMode m : {RecomputeMode::none, RecomputeMode::full, RecomputeMode::every_other, RecomputeMode::automatic})
    if (text == to_string(m)) return m;
  return std::nullopt;
}

RecomputeMode recompute_mode_option(std::string_view text, bool memory_limited) {
  if (text.empty()) return memory_limited ? RecomputeMode::automatic : RecomputeMode::none;
  if (std::optional<RecomputeMode> m = parse_recompute_mode(text)) return *m;
  throw UserError(cat("--recompute must be auto, none, full or every-other, got '", text, "'"));
}

namespace {

// Keeps, of points sorted by saving, those no other point beats on both
// counts (more or as much saved, less or as much time); then, past
// max_points, every other one but the extremes (thinning keeps feasible
// answers, not always the cheapest).
template <class P>
void keep_pareto(std::vector<P>& pts, size_t max_points, bool& thinned) {
  std::sort(pts.begin(), pts.end(), [](const P& a, const P& b) {
    return a.saved != b.saved ? a.saved > b.saved : a.time < b.time;
  });
  std::vector<P> kept;
  double best = std::numeric_limits<double>::infinity();
  for (P& p : pts)
    if (p.time < best) {
      best = p.time;
      kept.push_back(std::move(p));
    }
  std::reverse(kept.begin(), kept.end());  // ascending saving and time
  while (kept.size() > max_points) {
    thinned = true;
    std::vector<P> half;
    for (size_t i = 0; i < kept.size(); ++i)
      if (i % 2 == 0 || i + 1 == kept.size()) half.push_back(std::move(kept[i]));
    kept = std::move(half);
  }
  pts = std::move(kept);
}

template <class P, class Add>
void add_item(std::vector<P>& pts, double saved, double time, size_t max_points, bool& thinned, Add&& add) {
  if (!(saved > 0)) return;  // never worth its time
  const size_t n = pts.size();
  for (size_t i = 0; i < n; ++i) {
    P q = pts[i];
    q.saved += saved, q.time += time;
    add(q);
    pts.push_back(std::move(q));
  }
  keep_pareto(pts, max_points, thinned);
}

}  // namespace

RecomputeChoices::RecomputeChoices(const PlanningGraph& g, const StateSpace& s, RecomputeMode mode)
    : space_(s), mode_(mode) {
  if (mode == RecomputeMode::none) return;
  for (size_t v = 0; v < g.nodes.size(); ++v) {
    const PlanningNode& n = g.nodes[v];
    double input = 0;
    for (int u : g.in[v]) input += g.nodes[u].output_bytes;
    items_.push_back({int(v), n.forward_s, n.activation_bytes - input, n.activation_bytes, n.profile_index % 2 == 1});
  }
  rows_.resize(size_t(s.size()));
}

StageFootprint stage_footprint(const PlanningGraph& g, const std::vector<int>& nodes, const std::vector<int>& recomputed,
                               int replicas) {
  StageFootprint f;
  f.replicas = replicas;
  for (int v : nodes) {
    const PlanningNode& n = g.nodes[size_t(v)];
    f.parameter_bytes += n.parameter_bytes, f.optimizer_state_bytes += n.optimizer_state_bytes;
    f.activation_bytes += n.activation_bytes;
    f.workspace_bytes = std::max(f.workspace_bytes, n.workspace_bytes);
    f.forward_working_bytes = std::max(f.forward_working_bytes, n.forward_workspace_bytes);
  }
  // Per position in the stage: recomputed, and what that saves (its
  // activations less the input it keeps).
  std::vector<bool> again(nodes.size(), false);
  std::vector<double> saved(nodes.size(), 0.0);
  for (size_t k = 0; k < nodes.size(); ++k) {
    const int v = nodes[k];
    if (std::find(recomputed.begin(), recomputed.end(), v) == recomputed.end()) continue;
    double input = 0;
    for (int u : g.in[size_t(v)]) input += g.nodes[size_t(u)].output_bytes;
    again[k] = true;
    saved[k] = g.nodes[size_t(v)].activation_bytes - input;
    f.activation_bytes -= saved[k];
    f.recompute_bytes = std::max(f.recompute_bytes, saved[k]);
  }
  // A tensor two neighbours keep (the one before keeps its output, which
  // this one keeps as its input) is held once - unless the one before
  // drops what it kept, recomputed.
  std::vector<double> shared(nodes.size(), 0.0);
  for (size_t k = 1; k < nodes.size(); ++k) {
    const int v = nodes[k], u = nodes[k - 1];
    const std::vector<int>& in = g.in[size_t(v)];
    if (std::find(in.begin(), in.end(), u) == in.end() || again[k - 1]) continue;
    shared[k] = g.nodes[size_t(v)].shared_activation_bytes;
    f.activation_bytes -= shared[k];
  }
  // The fused backward goes down the layers: each frees what it kept once
  // done, a recomputed one first makes its activations again - its forward
  // runs beside the gradient it received (its output's size), then its
  // backward.
  // Split from W, a layer keeps its weight-pass context instead.
  double freed = 0, freed_for_w = 0;
  for (size_t k = nodes.size(); k-- > 0;) {
    const PlanningNode& n = g.nodes[size_t(nodes[k])];
    const double forward_again = again[k] ? n.output_bytes + n.forward_workspace_bytes : 0.0;
    const double working = std::max(n.workspace_bytes, forward_again) + std::max(0.0, saved[k]);
    f.backward_working_bytes = std::max(f.backward_working_bytes, working - freed);
    f.input_backward_working_bytes = std::max(f.input_backward_working_bytes, working - freed_for_w);
    const double kept = n.activation_bytes - saved[k] - shared[k];
    freed += kept;
    freed_for_w += kept - n.weight_pass_bytes;
  }
  return f;
}

// The stage's nodes in the space's order (prefix spaces) or ascending.
std::vector<RecomputeChoices::Item> RecomputeChoices::stage_items(int k, int j) const {
  std::vector<Item> out;
  if (space_.all_earlier_nest()) {
    for (int i = k; i < j; ++i) out.push_back(items_[size_t(space_.order[size_t(i)])]);
  } else {
    for (int v : space_.stage_nodes(k, j)) out.push_back(items_[size_t(v)]);
  }
  return out;
}

double RecomputeChoices::transient(int k, int j) const {
  double most = 0;
  for (const Item& it : stage_items(k, j)) most = std::max(most, it.saved_bytes);
  return most;
}

Recomputation RecomputeChoices::fixed(int k, int j) const {
  Recomputation r;
  if (mode_ != RecomputeMode::full && mode_ != RecomputeMode::every_other) return r;
  double most = 0;
  for (const Item& it : stage_items(k, j)) {
    if (mode_ == RecomputeMode::full || it.odd_layer) {
      most = std::max(most, it.saved_bytes);
      r.forward_s += it.forward_s;
      r.saved_bytes += it.saved_bytes;
      r.nodes.push_back(it.node);
    }
  }
  if (!r.nodes.empty()) r.transient_bytes = most;
  return r;
}

const std::vector<RecomputeChoices::Point>& RecomputeChoices::frontier(int k, int j) const {
  if (!space_.all_earlier_nest()) {
    auto [it, fresh] = pairs_.try_emplace({k, j});
    if (fresh) {
      it->second = {{0, 0}};
      for (const Item& x : stage_items(k, j))
        add_item(it->second, x.saved_bytes, x.forward_s, kMaxFrontier, exact_, [](Point&) {});
    }
    return it->second;
  }
  auto& row = rows_[size_t(k)];
  while (int(row.size()) < j - k) {
    std::vector<Point> pts = row.empty() ? std::vector<Point>{{0, 0}} : row.back();
    const Item& it = items_[size_t(space_.order[size_t(k) + row.size()])];
    add_item(pts, it.saved_bytes, it.forward_s, kMaxFrontier, exact_, [](Point&) {});
    row.push_back(std::move(pts));
  }
  return row[size_t(j - k - 1)];
}

std::optional<Recomputation> RecomputeChoices::cheapest(int k, int j, double bytes) const {
  if (mode_ != RecomputeMode::automatic) return std::nullopt;
  if (bytes <= 0) return Recomputation{};
  const std::vector<Point>& f = frontier(k, j);
  auto it = std::lower_bound(f.begin(), f.end(), bytes, [](const Point& p, double b) { return p.saved < b; });
  if (it == f.end()) return std::nullopt;
  return Recomputation{it->time, it->saved, transient(k, j), {}};
}

std::optional<Recomputation> RecomputeChoices::choose(int k, int j, double bytes) const {
  if (mode_ != RecomputeMode::automatic) return fixed(k, j);
  if (bytes <= 0) return Recomputation{};
  const std::vector<Item> stage = stage_items(k, j);
  bool thinned = false;
  const auto f = recompute_frontier(stage, kMaxFrontier, thinned);
  for (const RecomputeFrontierPoint& p : f)
    if (p.saved >= bytes) {
      Recomputation r{p.time, p.saved, transient(k, j), {}};
      for (int m : p.members) r.nodes.push_back(stage[size_t(m)].node);
      std::sort(r.nodes.begin(), r.nodes.end());
      return r;
    }
  return std::nullopt;
}

std::vector<RecomputeFrontierPoint> recompute_frontier(const std::vector<RecomputeChoices::Item>& items,
                                                       size_t max_points, bool& thinned) {
  std::vector<RecomputeFrontierPoint> pts = {{0, 0, {}}};
  for (size_t i = 0; i < items.size(); ++i)
    add_item(pts, items[i].saved_bytes, items[i].forward_s, max_points, thinned,
             [i](RecomputeFrontierPoint& q) { q.members.push_back(int(i)); });
  return pts;
}

}  // namespace pd
