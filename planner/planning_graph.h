#pragma once
// The profile as the planner sees it: nodes in a topological order with
// their costs in seconds and bytes, and adjacency. For PipeDream graph.txt
// profiles the model-input sources ("Input…") and the "__getitem__" sinks
// are dropped, as PipeDream's optimizer does.
#include <cstdint>
#include <string>
#include <vector>

#include "profiler/profile.h"

namespace pd {

struct PlanningNode {
  int profile_index = 0;     // position in Profile::nodes
  double forward_s = 0, backward_s = 0;
  double output_bytes = 0;   // sent to consumers
  double activation_bytes = 0;  // stashed for backward
  double parameter_bytes = 0, optimizer_state_bytes = 0;
  int source_line = 0;
  double workspace_bytes = 0;  // working memory while it computes (profile.h)
  // What its forward allocates at its peak (profile.h; not measured: workspace_bytes).
  double forward_workspace_bytes = 0;
  double weight_pass_bytes = 0;  // kept from its B to its W where they are split (profile.h)
  double shared_activation_bytes = 0;  // of activation_bytes, kept by the node before it too (profile.h)
};

struct PlanningGraph {
  std::vector<PlanningNode> nodes;    // topological order
  std::vector<std::vector<int>> out;  // out-neighbours, in edge order
  std::vector<std::vector<int>> in;
  std::vector<int> dropped;           // profile indices not planned (PipeDream's Input / __getitem__)
  bool is_chain() const;              // node i feeds exactly node i+1
};

PlanningGraph build_planning_graph(const Profile& profile);

}  // namespace pd
