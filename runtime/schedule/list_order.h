#pragma once
// Orders found by running the pipeline in unit steps, for schedules that
// say what they want rather than spell each worker's order out (the V
// shapes, zb-h2): F = B = W = one step, messages free. Each step every
// worker runs the first of its ready actions by these rules:
//  1. a B, the oldest microbatch first (then the later stage): it frees
//     memory and the pipeline's fill and drain wait on it;
//  2. an F while the worker holds fewer than `cap` microbatch-stages
//     between F and W (B with split_backward false), the later stage first;
//     an F of a stage that is not the worker's last leaves one place, so
//     the stages that turn the microbatch around always can run;
//  3. a W (split_backward), the oldest first.
// Each stage runs its F's, B's and W's in microbatch order. The result is
// deadlock-free by construction (it is an execution); the builder throws
// std::logic_error if the rules stall, which `cap` >= 2 rules out.
#include <functional>
#include <vector>

#include "runtime/schedule/schedule_kind.h"

namespace pd {

struct ListOrderRules {
  bool split_backward = true;
  // Most microbatch-stages a worker holds between F and W (or B).
  std::function<int(int worker)> cap;
};

std::vector<std::vector<OrderEntry>> list_order(const Schedule& schedule, const ListOrderRules& rules);

}  // namespace pd
