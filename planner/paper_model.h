#pragma once
// The default cost model (the paper's, docs/design.md §5): a stage of layers on
// m replicas takes max(compute, weight sync) / m, a split costs 2·C for the
// activation and its gradient, and every stage must fit in worker memory
// (exact per-stage accounting of weight versions, gradient, optimizer state
// and in-flight activations under 1F1B-RR).
#include "planner/planned_stage.h"
#include "planner/planner_options.h"
#include "planner/planning_graph.h"
#include "planner/topology.h"

namespace pd {

// How one level's optimum is found. The table DP is exact always; the
// parametric search is exact without a memory limit (a stage's fit then
// does not depend on the workers before it). `automatic` uses the
// parametric search for large instances without a memory limit.
enum class PaperAlgorithm { automatic, table, parametric };

PlannedPipeline plan_paper(const PlanningGraph& g, const Topology& topology, const PlannerOptions& options,
                           PaperAlgorithm algorithm = PaperAlgorithm::automatic);

}  // namespace pd
