#include "profiler/format/profile_graph.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <queue>
#include <unordered_map>

#include "core/error.h"

namespace pd::profile_detail {

double parse_non_negative(const std::string& text, const std::string& where, const std::string& what) {
  const char* begin = text.c_str();
  while (*begin == ' ') ++begin;
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(begin, &end);
  while (end && *end == ' ') ++end;
  if (end == begin || *end != '\0' || errno == ERANGE || !std::isfinite(v) || v < 0)
    throw UserError(cat(where, ": ", what, " must be a non-negative number, got '", text, "'"));
  return v;
}

namespace {
// A graph in two pieces is a profile with an edge missing (a hand-edited
// graph.txt, a truncated edge list): planning it would cut between pieces
// that really exchange tensors, so it is refused, naming a node of the
// piece that does not hold the first node.
void require_connected(const Profile& p, const SourceLocator& where, const std::vector<std::vector<int>>& out) {
  const int n = int(p.nodes.size());
  std::vector<std::vector<int>> adjacent(n);
  for (int v = 0; v < n; ++v)
    for (int w : out[v]) {
      adjacent[v].push_back(w);
      adjacent[w].push_back(v);
    }
  std::vector<char> seen(n, 0);
  std::vector<int> stack{0};
  seen[0] = 1;
  while (!stack.empty()) {
    const int v = stack.back();
    stack.pop_back();
    for (int w : adjacent[v])
      if (!seen[w]) seen[w] = 1, stack.push_back(w);
  }
  for (int v = 0; v < n; ++v)
    if (!seen[v])
      throw UserError(cat(where.node(v), ": node ", p.nodes[v].id, " is not connected to node ", p.nodes[0].id,
                          " (the graph falls apart into pieces: an edge is missing)"));
}
}  // namespace

void validate_graph(Profile& p, const SourceLocator& where, bool reorder_topologically) {
  if (p.nodes.empty()) throw UserError(cat(p.source_path, ": the profile has no nodes (empty graph)"));
  std::unordered_map<int, int> index_of;
  for (int i = 0; i < int(p.nodes.size()); ++i)
    if (!index_of.emplace(p.nodes[i].id, i).second)
      throw UserError(cat(where.node(i), ": duplicate node id ", p.nodes[i].id));
  const int n = int(p.nodes.size());
  std::vector<std::vector<int>> out(n);
  std::vector<int> in_degree(n, 0);
  for (int e = 0; e < int(p.edges.size()); ++e) {
    auto [a, b] = p.edges[e];
    auto ia = index_of.find(a), ib = index_of.find(b);
    if (ia == index_of.end() || ib == index_of.end())
      throw UserError(cat(where.edge(e), ": edge ", a, " -> ", b, " names unknown node ",
                          ia == index_of.end() ? a : b));
    if (a == b) throw UserError(cat(where.edge(e), ": edge ", a, " -> ", b, " is a self loop"));
    out[ia->second].push_back(ib->second);
    ++in_degree[ib->second];
  }
  require_connected(p, where, out);
  // Kahn's algorithm, smallest file position first among the ready nodes.
  std::priority_queue<int, std::vector<int>, std::greater<int>> ready;
  for (int i = 0; i < n; ++i)
    if (in_degree[i] == 0) ready.push(i);
  std::vector<int> order;
  order.reserve(n);
  while (!ready.empty()) {
    int v = ready.top();
    ready.pop();
    order.push_back(v);
    for (int w : out[v])
      if (--in_degree[w] == 0) ready.push(w);
  }
  if (int(order.size()) != n) {
    int stuck = 0;
    while (in_degree[stuck] == 0) ++stuck;
    throw UserError(cat(where.node(stuck), ": the graph has a cycle through node ", p.nodes[stuck].id));
  }
  if (!reorder_topologically) return;
  std::vector<ProfileNode> sorted;
  sorted.reserve(n);
  for (int v : order) sorted.push_back(std::move(p.nodes[v]));
  p.nodes = std::move(sorted);
}

}  // namespace pd::profile_detail
