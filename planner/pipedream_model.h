#pragma once
// `--cost-model pipedream`: a faithful reproduction of PipeDream's released
// optimizer (optimizer_graph_hierarchical.py), quirks included; the rules
// are in docs/planner-pipedream-compat.md.
#include "planner/planned_stage.h"
#include "planner/planner_options.h"
#include "planner/planning_graph.h"
#include "planner/topology.h"

namespace pd {

// One stage of a one-level layout as PipeDream prints it: the half-open
// state range [start, end) and replicas.
struct PipedreamLayoutStage {
  int start = 0, end = 0, replicas = 1;
  double compute_s = 0;  // filled by evaluate_pipedream_layout
};

// The time of a given one-level layout under PipeDream's rules (the value
// its recursion assigns to that split sequence); lets tests tell a tie from
// a different optimum.
double evaluate_pipedream_layout(const PlanningGraph& g, const Topology& topology, const PlannerOptions& options,
                                 std::vector<PipedreamLayoutStage>& layout);

PlannedPipeline plan_pipedream(const PlanningGraph& g, const Topology& topology, const PlannerOptions& options);

}  // namespace pd
