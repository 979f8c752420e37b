#pragma once
// What a cost model hands back: the stages of the optimal pipeline over the
// planning graph, before they are turned into a Plan.
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/plan_kinds.h"

namespace pd {

struct PlannedStage {
  std::vector<int> nodes;  // planning-graph node indices
  std::vector<int> ranks;  // workers running a replica of this stage
  double time_s = 0;       // the stage's per-minibatch time under the cost model
  double sync_s = 0;       // weight synchronisation per minibatch on one replica
  double transfer_s = 0;   // activation + gradient transfer into the stage
  double memory_bytes = 0;
  int in_flight = 1;
  // Activation recomputation: the nodes recomputed and their extra forward per minibatch.
  std::vector<int> recompute_nodes;
  double recompute_s = 0;
};

// No allocation satisfies the constraints (memory, worker count); the
// planner turns it into a UserError naming what would work.
struct NoFeasiblePlan : std::runtime_error {
  using std::runtime_error::runtime_error;
};

struct PlannedPipeline {
  std::vector<PlannedStage> stages;
  double time_per_minibatch_s = 0;
  double single_worker_s = 0, data_parallel_s = 0;
  StateSpaceKind state_space = StateSpaceKind::chain;
};

}  // namespace pd
