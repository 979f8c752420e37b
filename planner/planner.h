#pragma once
// The planner's public entry: profile + topology -> the optimal pipeline
// (PipeDream's partitioning with replication, docs/design.md §5).
#include "planner/plan.h"
#include "planner/planner_options.h"
#include "planner/topology.h"
#include "profiler/profile.h"

namespace pd {

// Sets the plan's predicted time per minibatch, what it was predicted by,
// and what follows from it: throughput and the speed-ups over the
// baselines (0 for a baseline that does not fit in memory).
void set_predicted_time(Plan& plan, double seconds, PredictedBy by);

// Throws UserError when no allocation fits (message names the smallest
// memory per worker / worker count that would work).
Plan plan_pipeline(const Profile& profile, const Topology& topology, const PlannerOptions& options);

// The least memory per worker with which some plan fits: more than
// `more_than` (no plan fits in it), and `fits` does, within 5% of each other
// when the search had time. plan_pipeline's error when nothing fits names
// it, with and without recomputation (PlannerOptions::recompute).
struct MemoryNeed {
  uint64_t more_than = 0, fits = 0;
};

// A comparison point: layers split into min(workers, layers) contiguous
// stages of (nearly) equal compute, one worker each, timed under the paper
// cost model on the innermost bandwidth (GPipe-style naive partition).
Plan plan_equal_split(const Profile& profile, const Topology& topology);

}  // namespace pd
