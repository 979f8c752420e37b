#pragma once
// A flushing schedule's plan under a memory limit (`plan --schedule auto`'s
// flush families at each microbatch count, `run --plan auto --schedule X
// --memory`): the planner's fastest straight cut and, under --recompute,
// each stage's recomputed layers (planner/recompute.h: the chooser the
// 1f1b-rr planner uses, cut and recomputation chosen together), priced by
// the schedule's own memory. Each rank is planned to hold what the
// schedule's replay of the plan ignoring memory holds at its peak
// (WorkerReport::peak_held items, each its share of the profile's batch:
// PlannerOptions::held_minibatches, item_share); the orders are fixed, so
// the count does not depend on the cut. A rank running several stages
// (interleaved, V shapes) is planned with an even share of its held count
// on each, in an even share of the limit (where that fails, with all of it
// on each). The replay of the result
// (worker_memory.h, messages included) decides: where it is above the
// limit, the planner is asked again under the limit less the excess, a few
// times. Under --recompute auto, where that fails, the same without
// recomputation (so auto fits wherever none does).
#include <string>
#include <vector>

#include "planner/planner.h"
#include "profiler/profile.h"
#include "runtime/schedule/schedule.h"
#include "runtime/simulator/simulator.h"

namespace pd {

struct FlushReplay {
  Plan plan;
  SimulationReport report;
  std::vector<double> worker_memory_bytes;  // by rank (worker_memory.h)
  double peak_memory_bytes = 0;             // the fullest worker
};

// The plan under `schedule` (its minibatches: batches replayed), each
// worker's memory and the steady state's time. A plan whose batch
// (Plan::batch) is not the profile's was profiled at one microbatch (`run
// --plan auto` with a flush schedule): its stage times are a microbatch's
// and its messages are scaled to the batch; otherwise a microbatch costs
// the profile's times at its size where measured, a share of the batch's
// otherwise.
FlushReplay replay_flush(const Plan& plan, const Profile& profile, const ScheduleOptions& schedule);

struct FlushFit {
  FlushReplay replay;  // the fitting plan's; where nothing fits, the fastest's
  bool fits = false;
  double fastest_peak_bytes = 0;  // the fullest worker of the plan ignoring memory
  std::string note;    // why nothing fits
};

// `fastest`: the plan ignoring memory, of as many stages as the schedule
// runs (`stages`: the flat or hierarchical topology of those stages, one
// worker each, that the planner cuts on). `options` gives the recomputation
// and the cost model; `limit` the bytes per worker (0: none).
FlushFit fit_flush_plan(const Profile& profile, const Plan& fastest, const Topology& stages, PlannerOptions options,
                        const ScheduleOptions& schedule, double limit);

}  // namespace pd
