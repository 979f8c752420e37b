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

// Bytes one worker of the stage holds: a weight version per in-flight
// minibatch (stashing) plus the gradient, the optimizer state, and the
// activations each in-flight minibatch stashes for its backward.
inline double stage_memory_bytes(double parameter_bytes, double optimizer_state_bytes, double activation_bytes,
                                 int in_flight) {
  return parameter_bytes * (in_flight + 1) + optimizer_state_bytes + activation_bytes * in_flight;
}

}  // namespace pd
