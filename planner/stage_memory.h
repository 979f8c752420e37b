#pragma once
// A pipeline stage's memory per worker and its in-flight minibatches under
// 1F1B-RR (docs/design.md §5-6). The one definition the planner's memory
// check, `simulate`'s report and `run`'s end-of-run report all use.
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
  double boundary_bytes = 0;    // sent to the next stage per minibatch (0 for the last)
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
};

// Bytes one worker of the stage holds (what `run` measures, less the data
// set and the kernels' scratch):
// - a weight version per in-flight minibatch (stashing; or weight_versions)
//   and the gradient;
// - the optimizer state;
// - per in-flight minibatch, its stashed activations, and the activation it
//   sends on and the gradient that comes back for it (message buffers live
//   until the transfer completes);
// - with replicas, one more copy of the gradients, which the bucketed
//   all-reduce sends from;
// - the working memory of the layer computing at the time (the gradient it
//   receives and what it allocates while it runs), the most of its layers.
inline double stage_memory_bytes(const StageFootprint& s, int in_flight) {
  const int versions = s.weight_versions > 0 ? s.weight_versions : in_flight;
  return s.parameter_bytes * (versions + 1) + s.optimizer_state_bytes +
         (s.activation_bytes + 2 * s.boundary_bytes) * in_flight + (s.replicas > 1 ? s.parameter_bytes : 0) +
         s.workspace_bytes + s.recompute_bytes;
}

}  // namespace pd
