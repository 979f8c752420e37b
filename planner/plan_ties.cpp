#include "planner/plan_ties.h"

#include <algorithm>
#include <set>

namespace pd {

namespace {

int stage_of_node(const Profile& profile, const Plan& plan, int id) {
  for (const PlanStage& s : plan.stages)
    if (std::find(s.nodes.begin(), s.nodes.end(), id) != s.nodes.end()) return s.index;
  // A chain plan: layer ranges number the profile's nodes in order.
  for (size_t k = 0; k < profile.nodes.size(); ++k) {
    if (profile.nodes[k].id != id) continue;
    for (const PlanStage& s : plan.stages)
      if (int(k) >= s.first_layer && int(k) <= s.last_layer) return s.index;
  }
  return -1;
}

double exchange_seconds(const Plan& plan, const std::vector<int>& stages, double bytes) {
  double slowest = 0;
  for (int a : stages)
    for (int b : stages) {
      if (a == b || plan.stages[size_t(a)].ranks.empty()) continue;
      const int from = plan.stages[size_t(a)].ranks.front();
      for (int to : plan.stages[size_t(b)].ranks)
        slowest = std::max(slowest, plan.topology.latency_between(from, to) +
                                        bytes / (plan.topology.bandwidth_between(from, to) * 1e9));
    }
  return slowest;
}

}  // namespace

std::vector<PlanTie> plan_ties(const Profile& profile, const Plan& plan) {
  std::vector<PlanTie> out;
  for (const ProfileTie& t : profile.ties) {
    std::set<int> stages;
    for (int id : t.nodes) {
      const int s = stage_of_node(profile, plan, id);
      if (s >= 0) stages.insert(s);
    }
    if (stages.size() < 2) continue;
    PlanTie tie{t.parameter, t.bytes, {stages.begin(), stages.end()}, 0};
    tie.exchange_s = exchange_seconds(plan, tie.stages, double(t.bytes));
    out.push_back(std::move(tie));
  }
  return out;
}

double tie_exchange_s(const Plan& plan, int stage) {
  double s = 0;
  for (const PlanTie& t : plan.ties)
    if (std::find(t.stages.begin(), t.stages.end(), stage) != t.stages.end()) s += t.exchange_s;
  return s;
}

double slowest_tie_exchange_s(const Plan& plan) {
  double most = 0;
  for (const PlanStage& s : plan.stages) most = std::max(most, tie_exchange_s(plan, s.index));
  return most;
}

}  // namespace pd
