#pragma once
// What a caller asks of the planner, beyond the profile and the topology;
// read by plan_pipeline and by each cost model.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "planner/plan_kinds.h"
#include "planner/recompute.h"

namespace pd {

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
  // The memory model that limit checks a stage against (stage_memory.h):
  // 0, 1F1B-RR's, a weight version and a minibatch's activations per
  // minibatch in flight where the stage sits; n >= 1, a schedule that keeps
  // n weight versions and at most one minibatch's activations (its
  // microbatches') on a stage at once, wherever it sits (1f1b-flush, gpipe,
  // the zero-bubble schedules: 1; 2bw: 2). `plan --schedule auto` asks for
  // it when the straight optimum ignoring memory does not fit such a schedule.
  int weight_versions = 0;
  // With weight_versions >= 1, a flushing schedule at M microbatches as its
  // replay holds them (runtime/simulator/flush_fit.h): the activations a
  // stage on each rank holds at its peak, in minibatches of the profile
  // (held microbatches x their share of it; empty: one wherever it sits),
  // and an item's share of the profile's batch, which scales a layer's
  // working memory and a recomputed layer's transient (1: a minibatch's).
  std::vector<double> held_minibatches;
  double item_share = 1;
  double held_at(int rank) const {
    if (held_minibatches.empty()) return 1;
    if (rank >= 0 && size_t(rank) < held_minibatches.size()) return held_minibatches[size_t(rank)];
    return *std::max_element(held_minibatches.begin(), held_minibatches.end());
  }
  // PipeDream's --activation_compression_ratio; unset: the pipedream model
  // ignores activation transfer (the paper model always counts it).
  std::optional<double> activation_compression_ratio;
  // DAG profiles: the antichain state space is used when it has at most
  // this many states, else prefixes of a topological order.
  int max_antichain_states = 20000;
  // Activation recomputation (planner/recompute.h; paper cost model, prefix state spaces).
  RecomputeMode recompute = RecomputeMode::none;
};

}  // namespace pd
