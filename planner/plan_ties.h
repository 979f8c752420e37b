#pragma once
// Tied parameters in a plan (models/ties.h): the profile's tie groups whose
// reading nodes fall in two or more stages, and the price of exchanging
// their gradient once per optimizer step. Each stage's replica 0 sends its
// copy's gradient to every worker of the other stages, all at once, so a
// group's exchange takes its slowest such link: latency + bytes / bandwidth.
// The planner adds the slowest stage's exchanges to its prediction, and
// simulate adds each stage's to that stage's optimizer step.
#include <vector>

#include "planner/plan.h"
#include "profiler/profile.h"

namespace pd {

// The plan's tie groups (stages and exchange time from its ranks and topology).
std::vector<PlanTie> plan_ties(const Profile& profile, const Plan& plan);
// Seconds the exchanges of `stage` add to its optimizer step (0: none).
double tie_exchange_s(const Plan& plan, int stage);
// The most any stage's exchanges take: what a step of the pipeline adds.
double slowest_tie_exchange_s(const Plan& plan);

}  // namespace pd
