#include "planner/antichain_dag.h"

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>

namespace pd {
namespace {

struct Reachability {
  std::vector<DynamicBitset> pred, succ;
};

Reachability reachability(const PlanningGraph& g) {
  const size_t n = g.nodes.size();
  Reachability r{std::vector<DynamicBitset>(n, DynamicBitset(n)), std::vector<DynamicBitset>(n, DynamicBitset(n))};
  for (size_t v = 0; v < n; ++v)  // nodes are in topological order
    for (int u : g.in[v]) {
      r.pred[v] |= r.pred[u];
      r.pred[v].set(u);
    }
  for (size_t v = n; v-- > 0;)
    for (int w : g.out[v]) {
      r.succ[v] |= r.succ[w];
      r.succ[v].set(w);
    }
  return r;
}

// augment(A): A plus every ancestor p of a member a that feeds a node outside
// pred(a) ∪ {a} (its output is still needed after the cut).
DynamicBitset augment(const PlanningGraph& g, const Reachability& r, const DynamicBitset& a_set) {
  DynamicBitset out = a_set;
  a_set.for_each([&](size_t a) {
    r.pred[a].for_each([&](size_t p) {
      for (int o : g.out[p])
        if (size_t(o) != a && !r.pred[a].test(o)) {
          out.set(p);
          break;
        }
    });
  });
  return out;
}

DynamicBitset deaugment(const Reachability& r, const DynamicBitset& list) {
  DynamicBitset out = list;
  list.for_each([&](size_t x) {
    if (r.succ[x].intersects(list)) out.reset(x);
  });
  return out;
}

}  // namespace

bool build_antichain_dag(const PlanningGraph& g, size_t max_states, AntichainDag& dag) {
  const size_t n = g.nodes.size();
  Reachability r = reachability(g);
  // The first source in file order (graph.txt line), as PipeDream picks it.
  int first = -1;
  for (size_t v = 0; v < n; ++v)
    if (g.in[v].empty() && (first < 0 || g.nodes[v].source_line < g.nodes[first].source_line)) first = int(v);
  std::vector<DynamicBitset> antichains;
  std::vector<std::vector<int>> edges;  // state -> next states
  std::map<std::vector<uint64_t>, int> index_of;
  DynamicBitset start(n);
  start.set(first);
  antichains.push_back(start);
  edges.emplace_back();
  index_of[start.words()] = 0;
  for (size_t s = 0; s < antichains.size(); ++s) {
    DynamicBitset a = antichains[s];
    DynamicBitset g_set = augment(g, r, a);
    g_set.for_each([&](size_t x) {
      for (int nb : g.out[x]) {
        if (a.test(nb) || r.succ[nb].intersects(g_set)) continue;
        DynamicBitset replaced = g_set;
        replaced.reset(x);
        replaced.set(nb);
        DynamicBitset next = deaugment(r, replaced);
        auto [it, fresh] = index_of.emplace(next.words(), int(antichains.size()));
        if (fresh) {
          antichains.push_back(next);
          edges.emplace_back();
        }
        if (std::find(edges[s].begin(), edges[s].end(), it->second) == edges[s].end()) edges[s].push_back(it->second);
      }
    });
    if (antichains.size() > max_states) return false;
  }
  const size_t count = antichains.size();
  std::vector<DynamicBitset> closure(count, DynamicBitset(n)), boundary(count);
  for (size_t s = 0; s < count; ++s) {
    boundary[s] = augment(g, r, antichains[s]);
    closure[s] = boundary[s];
    antichains[s].for_each([&](size_t v) { closure[s] |= r.pred[v]; });
  }
  // PipeDream numbers the states by its depth-first topological sort:
  // roots in discovery order, children in edge order, reverse post-order.
  std::vector<int> order;
  order.reserve(count);
  std::vector<char> marked(count, 0);
  std::vector<std::pair<int, size_t>> stack;
  for (size_t root = 0; root < count; ++root) {
    if (marked[root]) continue;
    marked[root] = 1;
    stack.push_back({int(root), 0});
    while (!stack.empty()) {
      auto& [v, next_child] = stack.back();
      if (next_child < edges[v].size()) {
        int w = edges[v][next_child++];
        if (!marked[w]) {
          marked[w] = 1;
          stack.push_back({w, 0});
        }
      } else {
        order.push_back(v);
        stack.pop_back();
      }
    }
  }
  std::reverse(order.begin(), order.end());
  std::vector<int> position(count);
  for (size_t p = 0; p < count; ++p) position[order[p]] = int(p);
  dag.closure.clear();
  dag.boundary.clear();
  for (int s : order) {
    dag.closure.push_back(closure[s]);
    dag.boundary.push_back(boundary[s]);
  }
  dag.ancestors.assign(count, DynamicBitset(count));
  std::vector<std::vector<int>> parents(count);
  for (size_t s = 0; s < count; ++s)
    for (int t : edges[s]) parents[position[t]].push_back(position[s]);
  for (size_t s = 0; s < count; ++s)
    for (int p : parents[s]) {
      dag.ancestors[s] |= dag.ancestors[p];
      dag.ancestors[s].set(p);
    }
  return true;
}

}  // namespace pd
