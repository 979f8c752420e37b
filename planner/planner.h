#pragma once
// The planner's public entry: profile + topology -> the optimal pipeline
// (PipeDream's partitioning with replication, docs/design.md §5).
#include "core/error.h"
#include "planner/plan.h"
#include "planner/planner_options.h"
#include "planner/topology.h"
#include "profiler/profile.h"

namespace pd {

// Sets the plan's predicted time per minibatch, what it was predicted by,
// and what follows from it: throughput and the speed-ups over the
// baselines (0 for a baseline that does not fit in memory).
void set_predicted_time(Plan& plan, double seconds, PredictedBy by);

// No plan meets the memory limit: the message says why, and the figures
// that would work (0: none found) let a command print them as commands.
struct PlanDoesNotFit : UserError {
  PlanDoesNotFit(const std::string& what, uint64_t memory, uint64_t no_fit, int workers)
      : UserError(what), memory_that_fits(memory), memory_that_does_not(no_fit), workers_that_fit(workers) {}
  uint64_t memory_that_fits = 0;      // per worker, on the same workers
  uint64_t memory_that_does_not = 0;  // the largest tried that does not (below memory_that_fits)
  int workers_that_fit = 0;           // on a flat topology, with the same memory
};

// Throws PlanDoesNotFit when no allocation fits (message names the
// smallest memory per worker / worker count that would work), and a
// UserError when --straight asks for more stages than the model has
// layers (without fewer_workers).
Plan plan_pipeline(const Profile& profile, const Topology& topology, const PlannerOptions& options);

// The least memory per worker with which some plan fits: more than
// `more_than` (no plan fits in it), and `fits` does, within 0.05% of each other
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
