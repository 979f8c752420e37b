#pragma once
// What each worker of a plan holds at its peak under any schedule
// (planner/stage_memory.h's worker_memory_bytes): its stages' weights,
// gradients and optimizer state, the stashes of the items the schedule's
// replay holds at once, and one item's working memory. `plan --schedule
// auto`, `simulate --profile` and `run`'s summary use it.
#include <vector>

#include "planner/plan.h"
#include "planner/stage_memory.h"
#include "profiler/profile.h"
#include "runtime/simulator/simulator.h"

namespace pd {

// Each plan stage's footprint for one item of `microbatches` per
// minibatch (the plan's batch, else the profile's): the layers it
// recomputes (PlanStage::recompute_layers) keep only their inputs; the
// stash, the layers' working memory and the recomputation's transient
// scale with the item's samples against the profiled batch. Throws UserError if the plan's layers are not
// in the profile.
std::vector<StageFootprint> stage_footprints(const Plan& plan, const Profile& profile, int microbatches = 1);

// Each worker's predicted peak bytes, by rank, from a replay of the plan
// whose stashed bytes were stashed_bytes_from_profile(plan, profile)
// (its peak of held stashes): the weight versions it held (1f1b-rr with
// stashing, 2bw) or the schedule's one, its stages summed (a worker
// running several, interleaved or V-shaped, holds the weights of all).
std::vector<double> predicted_worker_memory(const Plan& plan, const Profile& profile, const SimulationReport& rep);

// Each plan stage's figure: the predicted peak of the worker that runs it
// (first chunk of it, where a worker runs several), from a short replay
// of `schedule` (its minibatches ignored).
std::vector<double> predicted_stage_memory(const Plan& plan, const Profile& profile, const ScheduleOptions& schedule);

}  // namespace pd
