#pragma once
// States for the paper cost model: nested sets of nodes ("everything before
// the cut"). A stage is the difference of two nested states.
//   chain:              prefixes of the chain (exact)
//   antichain:          every down-set of the DAG, i.e. every antichain cut (exact)
//   topological-prefix: prefixes of one topological order (when the down-sets
//                       are too many; a stage is then a contiguous range)
#include <string>
#include <vector>

#include "planner/bitset.h"
#include "planner/plan_kinds.h"
#include "planner/planning_graph.h"

namespace pd {

struct StateSpace {
  StateSpaceKind kind = StateSpaceKind::chain;
  // Prefix sums over each state's nodes; state 0 is empty, the last is all.
  std::vector<double> compute, parameters, activations, optimizer_state;
  std::vector<double> cut_bytes;  // bytes of every tensor crossing the cut
  // Empty for chain and topological-prefix (every earlier state nests);
  // for down-sets, the states strictly contained in each state.
  std::vector<std::vector<int>> nested_in;
  std::vector<DynamicBitset> members;  // antichain space only
  std::vector<int> order;              // topological order (prefix spaces)
  // Working memory: per state, the most of any of its nodes (down-sets),
  // and a sparse table of range maxima over `order` (prefix spaces).
  std::vector<double> workspace_in_state;
  std::vector<std::vector<double>> workspace_ranges;
  int size() const { return int(compute.size()); }
  // The most working memory of one node of the stage between states k < j:
  // exact for prefix spaces, the most of any node in j for down-sets (a
  // bound: the planner then checks memory a little conservatively).
  double workspace(int k, int j) const;
  bool all_earlier_nest() const { return nested_in.empty(); }
  // Planning-graph nodes of the stage between states k < j.
  std::vector<int> stage_nodes(int k, int j) const;
};

StateSpace build_state_space(const PlanningGraph& g, int max_states);

}  // namespace pd
