#pragma once
// Planning checked by replay. The planner's closed form (planner/) ranks
// plans by their slowest stage, link and all-reduce, but cannot see
// 1F1B-RR's in-flight windows: a stage replicated differently from its
// neighbours can starve under round-robin (gnmt's 1-2-1-3-1 on 8 workers
// replays twice as slow as its closed form). search_plan replays the
// closed-form optimum and the optima of the plan families whose replay the
// closed form describes exactly - uniform replication (every stage r
// workers: r independent straight pipelines), straight pipelines and data
// parallelism among them - plus one worker, and keeps the fastest replay.
#include <cstdint>
#include <string>
#include <vector>

#include "planner/planner.h"

namespace pd {

struct PlanCandidate {
  std::string family;        // "optimum", "straight", "uniform-R", "data-parallel", "one-worker"
  std::string config;
  double closed_form_s = 0;  // the planner's time per minibatch
  double replayed_s = 0;     // simulate's steady state (default timing)
};

struct PlanSearch {
  Plan plan;  // the fastest replay; its predicted time is that replay
  std::vector<PlanCandidate> candidates;
  size_t chosen = 0;
};

// The minibatches a plan is replayed for, here and by `simulate` unless
// told otherwise (so that `simulate` on the emitted plan reproduces the
// prediction): 1,000, eight rounds of the widest stage, and four periods of
// the schedule (replica_period) + 8 where the period is at most 5,000,
// whichever is most: the steady-state window then spans whole periods.
int64_t replay_minibatches(const Plan& plan);
// Above this many workers the closed-form optimum is returned unreplayed.
constexpr int kMaxReplayWorkers = 1024;

// Throws UserError, as plan_pipeline does, when no candidate fits. With
// --cost-model pipedream there is nothing to search: the plan is PipeDream's.
PlanSearch search_plan(const Profile& profile, const Topology& topology, const PlannerOptions& options,
                       int64_t minibatches = 0);  // 0: replay_minibatches(each plan)

// The time per minibatch simulate reports for the plan (default timing;
// with the profile, its gradient buckets priced as `simulate --profile`
// does).
double replay_time(const Plan& plan, int64_t minibatches = 0, const Profile* profile = nullptr);

}  // namespace pd
