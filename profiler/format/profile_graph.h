#pragma once
// Checks shared by both profile readers: every edge names known nodes, the
// graph is acyclic and not empty. Internal to pd_profile_format.
#include <functional>
#include <string>

#include "profiler/profile.h"

namespace pd::profile_detail {

// Where a node or an edge came from, as "file:line" (or "file" when unknown).
struct SourceLocator {
  std::function<std::string(int node_index)> node;
  std::function<std::string(int edge_index)> edge;
};

// Throws UserError for an empty graph, duplicate ids, edges naming unknown
// nodes, self loops or cycles. With `reorder_topologically`, nodes are
// reordered into a topological order that keeps the file order among nodes
// that are ready at the same time.
void validate_graph(Profile& p, const SourceLocator& where, bool reorder_topologically);

// Parses a non-negative finite number; throws UserError "<where>: <what> ...".
double parse_non_negative(const std::string& text, const std::string& where, const std::string& what);

}  // namespace pd::profile_detail
