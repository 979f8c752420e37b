#pragma once
// Invariants of per-worker action lists (docs/design.md §6). The runtime calls
// these before training on the lists it is about to execute; tests call them
// on every generated schedule.
#include <string>
#include <vector>

#include "runtime/schedule/schedule.h"

namespace pd {

// Checks `lists` (one per rank, as build_schedule makes them, or edited)
// against the shape and options of `schedule`:
//  - every send has exactly one receive on its peer with the same tag and
//    direction, in the same order per (sender, receiver, direction) pair,
//    and vice versa; peers are other ranks of the adjacent stage;
//  - an activation is received before its forward, a gradient before its
//    backward; every minibatch (microbatch) is run forward then backward
//    exactly once on every stage;
//  - the global dependency graph (program order, send -> receive, all
//    replicas of a stage joining each AllReduce round) is acyclic, i.e.
//    executing the lists cannot deadlock;
//  - at most in_flight_limit(rank) minibatches are between F and B;
//  - AllReduce rounds agree on gradient_count and their local gradients
//    add up to it; OptimizerStep creates previous + gradient_count
//    (flush: previous + 1);
//  - the weight versions obey the policy (see schedule.h).
// Returns one message per violation (at most `max_reports`); empty if valid.
std::vector<std::string> check_schedule(const Schedule& schedule,
                                        const std::vector<std::vector<Action>>& lists,
                                        size_t max_reports = 20);
// Builds the lists from `schedule` and checks them.
std::vector<std::string> check_schedule(const Schedule& schedule, size_t max_reports = 20);
// Throws RuntimeFailure listing the violations, if any.
void require_valid_schedule(const Schedule& schedule, const std::vector<std::vector<Action>>& lists);

}  // namespace pd
