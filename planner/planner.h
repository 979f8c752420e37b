#pragma once
// The planner's public entry: profile + topology -> the optimal pipeline
// (PipeDream's partitioning with replication, docs/design.md §5).
#include <cstdint>
#include <optional>
#include <string>

#include "planner/plan.h"
#include "planner/topology.h"
#include "profiler/profile.h"

namespace pd {

enum class CostModel { paper, pipedream };

struct PlannerOptions {
  CostModel cost_model = CostModel::paper;
  bool straight = false;        // no replication: one worker per stage
  bool fewer_workers = false;   // the optimum may leave workers idle
  // Uniform replication: every stage gets exactly this many workers (0:
  // any). Such plans are r independent straight pipelines under 1F1B-RR,
  // which the closed form describes exactly (planner/README.md).
  int stage_replicas = 0;
  // When nothing fits, search for the memory and worker count that would
  // (a few dozen more plans) and say so in the error.
  bool explain_infeasible = true;
  // Per-worker memory limit in bytes; 0 takes the topology's, and 0 there
  // means unlimited.
  uint64_t memory_bytes = 0;
  // PipeDream's --activation_compression_ratio; unset: the pipedream model
  // ignores activation transfer (the paper model always counts it).
  std::optional<double> activation_compression_ratio;
  // DAG profiles: the antichain state space is used when it has at most
  // this many states, else prefixes of a topological order.
  int max_antichain_states = 20000;
};

// Sets the plan's predicted time per minibatch, what it was predicted by,
// and what follows from it: throughput and the speed-ups over the
// baselines (0 for a baseline that does not fit in memory).
void set_predicted_time(Plan& plan, double seconds, const std::string& by);

// Throws UserError when no allocation fits (message names the smallest
// memory per worker / worker count that would work).
Plan plan_pipeline(const Profile& profile, const Topology& topology, const PlannerOptions& options);

// A comparison point: layers split into min(workers, layers) contiguous
// stages of (nearly) equal compute, one worker each, timed under the paper
// cost model on the innermost bandwidth (GPipe-style naive partition).
Plan plan_equal_split(const Profile& profile, const Topology& topology);

}  // namespace pd
