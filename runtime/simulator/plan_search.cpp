#include "runtime/simulator/plan_search.h"

#include <cmath>

#include "core/error.h"
#include "runtime/simulator/simulator.h"

namespace pd {
namespace {

// Candidate families: the closed-form optimum, then every uniform
// replication that covers the workers with at most one stage per node.
std::vector<std::pair<std::string, PlannerOptions>> families(const Profile& profile, const Topology& topology,
                                                            const PlannerOptions& options) {
  std::vector<std::pair<std::string, PlannerOptions>> out{{"optimum", options}};
  const int workers = topology.total_workers();
  for (int r = 1; r <= workers; ++r) {
    if (workers % r != 0 || workers / r > int(profile.nodes.size())) continue;
    if (options.straight && r > 1) break;
    PlannerOptions o = options;
    o.stage_replicas = r;
    out.emplace_back(r == 1 ? "straight" : r == workers ? "data-parallel" : cat("uniform-", r), o);
  }
  return out;
}

// The whole model on rank 0 of the topology.
Plan one_worker_plan(const Profile& profile, const Topology& topology, const PlannerOptions& options) {
  PlannerOptions o = options;
  o.stage_replicas = 0;
  o.memory_bytes = options.memory_bytes ? options.memory_bytes : topology.worker_memory_bytes;
  Plan plan = plan_pipeline(profile, flat_topology(1, topology.levels[0].bandwidth_GBps), o);
  plan.topology = topology;
  if (o.memory_bytes) plan.topology.worker_memory_bytes = o.memory_bytes;
  return plan;
}

void set_predicted(Plan& plan, double seconds) {
  plan.time_per_minibatch_s = seconds;
  plan.predicted_by = "replay";
  if (seconds <= 0) return;
  if (plan.profile.batch_size > 0) plan.throughput_samples_per_s = plan.profile.batch_size / seconds;
  plan.speedup_vs_single = std::isnan(plan.single_worker_s) ? 0.0 : plan.single_worker_s / seconds;
  plan.speedup_vs_data_parallel = std::isnan(plan.data_parallel_s) ? 0.0 : plan.data_parallel_s / seconds;
}

}  // namespace

double replay_time(const Plan& plan, int64_t minibatches) {
  SimulationOptions o;
  o.schedule.kind = parse_schedule_kind(plan.schedule);
  o.schedule.minibatches = minibatches;
  return simulate(plan, o).time_per_minibatch_s;
}

PlanSearch search_plan(const Profile& profile, const Topology& topology, const PlannerOptions& options,
                       int64_t replay_minibatches) {
  PlanSearch search;
  if (options.cost_model == CostModel::pipedream) {
    search.plan = plan_pipeline(profile, topology, options);
    search.candidates.push_back({"pipedream", search.plan.config, search.plan.time_per_minibatch_s, 0});
    return search;
  }
  std::vector<Plan> plans;
  std::string first_error;
  auto consider = [&](const std::string& family, Plan plan) {
    const double closed_form = plan.time_per_minibatch_s;
    plan.closed_form_s = closed_form;
    const double replayed = replay_time(plan, replay_minibatches);
    search.candidates.push_back({family, plan.config, closed_form, replayed});
    plans.push_back(std::move(plan));
  };
  for (const auto& [family, o] : families(profile, topology, options)) {
    try {
      consider(family, plan_pipeline(profile, topology, o));
    } catch (const UserError& e) {
      if (first_error.empty()) first_error = e.what();  // the unconstrained family's advice comes first
    }
    // The closed-form optimum replays at its closed form: no plan's closed
    // form is lower, so nothing else need be replayed.
    if (family == "optimum" && !plans.empty() &&
        search.candidates[0].replayed_s <= search.candidates[0].closed_form_s * (1 + 1e-9))
      break;
  }
  if (topology.total_workers() > 1) {
    try {
      consider("one-worker", one_worker_plan(profile, topology, options));
    } catch (const UserError&) {
    }
  }
  if (plans.empty()) throw UserError(first_error);
  for (size_t i = 1; i < plans.size(); ++i)
    if (search.candidates[i].replayed_s < search.candidates[search.chosen].replayed_s) search.chosen = i;
  search.plan = std::move(plans[search.chosen]);
  // The bound: no level-aligned plan's closed form beats the optimum's.
  search.plan.closed_form_bound_s = search.candidates[0].family == "optimum" ? search.candidates[0].closed_form_s : 0;
  set_predicted(search.plan, search.candidates[search.chosen].replayed_s);
  return search;
}

}  // namespace pd
