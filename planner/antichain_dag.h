#pragma once
// PipeDream's state space for DAG profiles: the DAG of antichains reached
// from the first source by its "next" rule (see
// docs/planner-pipedream-compat.md). Each state stands for the closure of
// its antichain (everything computed before the cut).
#include <vector>

#include "planner/bitset.h"
#include "planner/planning_graph.h"

namespace pd {

struct AntichainDag {
  // States in topological order (ancestors first).
  std::vector<DynamicBitset> closure;   // nodes of the state's closure
  std::vector<DynamicBitset> boundary;  // augment(A): the nodes whose outputs cross the cut
  std::vector<DynamicBitset> ancestors; // ancestor states in the antichain DAG
  size_t size() const { return closure.size(); }
};

// Returns false (and leaves `dag` partial) when more than max_states states
// exist: the caller falls back to a smaller state space.
bool build_antichain_dag(const PlanningGraph& g, size_t max_states, AntichainDag& dag);

}  // namespace pd
