#include "planner/state_space.h"

#include <algorithm>
#include <map>

namespace pd {
namespace {

void add_state(StateSpace& s, const PlanningGraph& g, const std::vector<int>& nodes_in_state,
               const std::vector<char>& inside) {
  double c = 0, p = 0, a = 0, o = 0, x = 0, w = 0;
  for (int v : nodes_in_state) {
    const PlanningNode& n = g.nodes[v];
    w = std::max(w, n.workspace_bytes);
    c += n.forward_s + n.backward_s;
    p += n.parameter_bytes;
    a += n.activation_bytes;
    o += n.optimizer_state_bytes;
    for (int w : g.out[v])
      if (!inside[w]) {
        x += n.output_bytes;
        break;
      }
  }
  s.compute.push_back(c), s.parameters.push_back(p), s.activations.push_back(a);
  s.optimizer_state.push_back(o), s.cut_bytes.push_back(x);
  s.workspace_in_state.push_back(w);
}

// Sparse table: ranges[p][i] = the most over order positions [i, i + 2^p).
void add_workspace_ranges(StateSpace& s, const PlanningGraph& g) {
  const int n = int(s.order.size());
  s.workspace_ranges.assign(1, std::vector<double>(n));
  for (int i = 0; i < n; ++i) s.workspace_ranges[0][i] = g.nodes[s.order[i]].workspace_bytes;
  for (int p = 1; (1 << p) <= n; ++p) {
    const auto& prev = s.workspace_ranges[p - 1];
    std::vector<double> level(n - (1 << p) + 1);
    for (size_t i = 0; i < level.size(); ++i) level[i] = std::max(prev[i], prev[i + (1 << (p - 1))]);
    s.workspace_ranges.push_back(std::move(level));
  }
}

StateSpace prefix_space(const PlanningGraph& g, StateSpaceKind kind) {
  StateSpace s;
  s.kind = kind;
  const int n = int(g.nodes.size());
  std::vector<char> inside(n, 0);
  s.order.resize(n);
  for (int v = 0; v < n; ++v) s.order[v] = v;
  double c = 0, p = 0, a = 0, o = 0;
  s.compute = {0}, s.parameters = {0}, s.activations = {0}, s.optimizer_state = {0}, s.cut_bytes = {0};
  // Cut bytes: a node's output crosses cut t while some consumer is after t.
  std::vector<double> delta(n + 2, 0);
  for (int v = 0; v < n; ++v) {
    int last_consumer = v;
    for (int w : g.out[v]) last_consumer = std::max(last_consumer, w);
    if (last_consumer > v) delta[v + 1] += g.nodes[v].output_bytes, delta[last_consumer + 1] -= g.nodes[v].output_bytes;
  }
  double crossing = 0;
  for (int t = 1; t <= n; ++t) {
    const PlanningNode& node = g.nodes[t - 1];
    c += node.forward_s + node.backward_s, p += node.parameter_bytes, a += node.activation_bytes;
    o += node.optimizer_state_bytes;
    crossing += delta[t];
    s.compute.push_back(c), s.parameters.push_back(p), s.activations.push_back(a), s.optimizer_state.push_back(o);
    s.cut_bytes.push_back(t == n ? 0 : crossing);
  }
  add_workspace_ranges(s, g);
  return s;
}

}  // namespace

std::vector<int> StateSpace::stage_nodes(int k, int j) const {
  std::vector<int> out;
  if (members.empty()) {
    for (int t = k; t < j; ++t) out.push_back(order[t]);
    return out;
  }
  members[j].for_each([&](size_t v) {
    if (!members[k].test(v)) out.push_back(int(v));
  });
  return out;
}

double StateSpace::workspace(int k, int j) const {
  if (workspace_ranges.empty()) return workspace_in_state[j];
  if (j <= k) return 0;
  int p = 0;
  while ((2 << p) <= j - k) ++p;
  return std::max(workspace_ranges[p][k], workspace_ranges[p][j - (1 << p)]);
}

StateSpace build_state_space(const PlanningGraph& g, int max_states) {
  if (g.is_chain()) return prefix_space(g, StateSpaceKind::chain);
  const int n = int(g.nodes.size());
  // Breadth-first over down-sets: add one node whose producers are all in.
  std::vector<DynamicBitset> sets = {DynamicBitset(n)};
  std::map<std::vector<uint64_t>, int> seen = {{sets[0].words(), 0}};
  for (size_t s = 0; s < sets.size(); ++s) {
    for (int v = 0; v < n; ++v) {
      if (sets[s].test(v)) continue;
      bool ready = true;
      for (int u : g.in[v]) ready &= sets[s].test(u);
      if (!ready) continue;
      DynamicBitset next = sets[s];
      next.set(v);
      if (seen.emplace(next.words(), int(sets.size())).second) sets.push_back(next);
      if (int(sets.size()) > max_states) return prefix_space(g, StateSpaceKind::topological_prefix);
    }
  }
  // BFS by size already orders the states by size: nested states come first.
  StateSpace space;
  space.kind = StateSpaceKind::antichain;
  std::vector<char> inside(n);
  for (const auto& set : sets) {
    std::vector<int> nodes;
    for (int v = 0; v < n; ++v) inside[v] = set.test(v);
    set.for_each([&](size_t v) { nodes.push_back(int(v)); });
    add_state(space, g, nodes, inside);
  }
  space.members = sets;
  space.nested_in.resize(sets.size());
  std::vector<size_t> sizes;
  for (const auto& set : sets) sizes.push_back(set.count());
  for (size_t j = 0; j < sets.size(); ++j)
    for (size_t k = j; k-- > 0;)  // nearest first, as for prefixes
      if (sizes[k] < sizes[j] && sets[k].subset_of(sets[j])) space.nested_in[j].push_back(int(k));
  return space;
}

}  // namespace pd
