#pragma once
// A pipeline stage's memory per worker and its in-flight minibatches under
// 1F1B-RR (docs/design.md §5-6), and one worker's memory under any
// schedule. The one definition the planner's memory check, `plan
// --schedule auto`, `simulate`'s report and `run`'s end-of-run report use.
#include <algorithm>
#include <cstdint>

namespace pd {

// Minibatches a replica of a stage holds at once under 1F1B-RR: the
// stage admits (R - 1 - workers_before) div replicas extra minibatches
// before its first backward (R: the plan's workers).
inline int in_flight_1f1b_rr(int total_workers, int workers_before, int replicas) {
  return (total_workers - 1 - workers_before) / replicas + 1;
}

struct StageFootprint {
  double parameter_bytes = 0, optimizer_state_bytes = 0;
  double activation_bytes = 0;  // stashed for the backward, per minibatch
  int replicas = 1;
  double workspace_bytes = 0;   // the most working memory of one of its layers while it computes
  // Activation recomputation (planner/recompute.h): activation_bytes is
  // then what the stage still stashes; this, the most one recomputed layer
  // makes again (its activation less the input kept), for one minibatch, on top.
  double recompute_bytes = 0;
  // Weight versions held: 0, one per in-flight minibatch (1F1B-RR's
  // stashing); n >= 1, n whatever the in-flight count (a schedule that
  // flushes: PlannerOptions::weight_versions).
  int weight_versions = 0;
  // What one item's forward and fused backward hold at their peak beyond
  // the stage's stash for it (planner/recompute.h's stage_footprint): the
  // forward, the most one of its layers allocates; the backward, walking
  // down the layers, a layer's working memory and what its recomputation
  // makes again (and, recomputed, its forward beside the gradient it
  // received), less the stash of the layers above it, already freed
  // (where B and W are split, less what those layers keep for W:
  // input_backward_working_bytes). What a replay prices each compute with;
  // the planner's own check keeps the bound workspace_bytes + recompute_bytes.
  double forward_working_bytes = 0, backward_working_bytes = 0, input_backward_working_bytes = 0;
};

// Bytes one worker holds at its peak (what `run` measures: its tensors,
// less the data set), under any schedule:
// - its weights in `weight_versions` versions (1; stashing: one per
//   in-flight minibatch; 2bw: 2), and their gradient;
// - the optimizer state; with replicas, one more copy of the gradients,
//   which the bucketed all-reduce sends from;
// - the stashed activations of the items (minibatches, or microbatches)
//   it holds at once (from a schedule's replay where there is one):
//   `held_activation_bytes`;
// - the working memory of the layer computing at the time (the gradient it
//   receives and what it allocates while it runs), the most of its layers,
//   and, recomputing, one recomputed layer's activations again. A replay
//   that prices these at each compute (SimulationOptions::working_bytes)
//   passes its peak of all three as `held_activation_bytes` and a
//   footprint without them.
// Messages are not counted per in-flight minibatch: a sent activation or
// gradient is freed once its send has copied it out (the same-host path's
// shared segment, MPI's buffers), a message not yet received stays with the
// transport (the same-host ring), and a received one becomes the stash of
// the layer it feeds or the gradient its backward takes as working memory.
// Measured against run's peaks for gpt-mini and cnn under every schedule:
// docs/measurements.md.
inline double worker_memory_bytes(const StageFootprint& s, double weight_versions, double held_activation_bytes) {
  return s.parameter_bytes * (weight_versions + 1) + s.optimizer_state_bytes +
         (s.replicas > 1 ? s.parameter_bytes : 0) + held_activation_bytes + s.workspace_bytes + s.recompute_bytes;
}

// Under 1F1B-RR with stashed weights: a weight version and a minibatch's
// stash per in-flight minibatch (with `weight_versions` set, the planner's
// flushing model: that many versions whatever the in-flight count).
// `in_flight` in minibatches' worth (a flushing schedule's held
// microbatches: a fraction, PlannerOptions::held_minibatches).
inline double stage_memory_bytes(const StageFootprint& s, double in_flight) {
  const double versions = s.weight_versions > 0 ? s.weight_versions : in_flight;
  return worker_memory_bytes(s, versions, s.activation_bytes * in_flight);
}

}  // namespace pd
