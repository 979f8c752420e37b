#include "runtime/simulator/plan_search.h"

#include <algorithm>
#include <cmath>
#include <exception>

#include "core/error.h"
#include "core/text.h"
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
    o.explain_infeasible = false;  // the unconstrained family explains
    out.emplace_back(r == 1 ? "straight" : r == workers ? "data-parallel" : cat("uniform-", r), o);
  }
  return out;
}

// The whole model on rank 0 of the topology.
Plan one_worker_plan(const Profile& profile, const Topology& topology, const PlannerOptions& options) {
  PlannerOptions o = options;
  o.stage_replicas = 0;
  o.explain_infeasible = false;
  o.memory_bytes = options.memory_bytes ? options.memory_bytes : topology.worker_memory_bytes;
  Plan plan = plan_pipeline(profile, flat_topology(1, topology.levels[0].bandwidth_GBps), o);
  plan.topology = topology;
  if (o.memory_bytes) plan.topology.worker_memory_bytes = o.memory_bytes;
  return plan;
}

}  // namespace

constexpr int64_t kMaxReplayMinibatches = 20000;

int64_t replay_minibatches(const Plan& plan) {
  int widest = 1;
  std::vector<int> replicas;
  for (const auto& s : plan.stages) {
    widest = std::max(widest, s.replicas);
    replicas.push_back(s.replicas);
  }
  // The steady-state window (the middle half) spans whole periods of the
  // schedule: at least two where that stays within kMaxReplayMinibatches.
  const int64_t period = replica_period(replicas);
  int64_t minibatches = std::max<int64_t>(1000, 8 * int64_t(widest));
  if (period <= kMaxReplayMinibatches / 4) minibatches = std::max(minibatches, 4 * period + 8);
  return minibatches;
}

double replay_time(const Plan& plan, int64_t minibatches, const Profile* profile) {
  SimulationOptions o;
  o.schedule.kind = parse_schedule_kind(plan.schedule);
  o.schedule.minibatches = minibatches > 0 ? minibatches : replay_minibatches(plan);
  if (profile) o.gradient_buckets = gradient_buckets_from_profile(plan, *profile);
  return simulate(plan, o).time_per_minibatch_s;
}

namespace {

double most_memory(const Plan& plan) {
  double most = 0;
  for (const auto& s : plan.stages) most = std::max(most, double(s.memory_bytes));
  return most;
}

class Search {
 public:
  Search(const Profile& profile, const Topology& topology, const PlannerOptions& options, int64_t minibatches)
      : profile_(profile), topology_(topology), options_(options), minibatches_(minibatches) {}

  PlanSearch run() {
    for (const auto& [family, o] : families(profile_, topology_, options_)) {
      if (family == "optimum") {
        optimum(o);
        if (tight()) break;  // it replays at its closed form, which no plan's closed form beats
      } else {
        try_plan(family, o);
      }
    }
    if (topology_.total_workers() > 1) {
      try {
        consider("one-worker", one_worker_plan(profile_, topology_, options_));
      } catch (const UserError&) {
      }
    }
    // Only the one-worker plan: a plan on the workers given is impossible,
    // and leaving all but one idle is what --fewer-workers allows.
    const bool only_one_worker = plans_.size() == 1 && search_.candidates[0].family == "one-worker";
    if (first_failure_ && (plans_.empty() || (only_one_worker && !options_.fewer_workers)))
      std::rethrow_exception(first_failure_);
    if (plans_.empty()) throw UserError("no plan found");
    for (size_t i = 1; i < plans_.size(); ++i)
      if (search_.candidates[i].replayed_s < search_.candidates[search_.chosen].replayed_s) search_.chosen = i;
    search_.plan = std::move(plans_[search_.chosen]);
    search_.plan.closed_form_bound_s = bound_;
    replayed_baselines(search_.plan);
    set_predicted_time(search_.plan, search_.candidates[search_.chosen].replayed_s, PredictedBy::replay);
    return std::move(search_);
  }

 private:
  // The closed-form optimum, and when it replays slower, other plans of
  // (nearly) the same closed form: the optimum again with less memory per
  // worker than the last one used, which rules that plan out.
  void optimum(PlannerOptions o) {
    if (!try_plan("optimum", o)) return;
    bound_ = search_.candidates[0].closed_form_s;
    // (Each is a memory-limited table DP, quadratic in workers: small clusters only.)
    if (topology_.total_workers() > kTighterOptimaWorkers) return;
    for (int step = 1; step <= kTighterOptima && !tight(); ++step) {
      const double limit = std::floor(most_memory(plans_.back()) * (1 - 1e-9));
      if (limit < 1) return;
      o.memory_bytes = uint64_t(limit);
      o.explain_infeasible = false;
      if (!try_plan(cat("optimum <", bytes_text(limit)), o)) return;
      if (search_.candidates.back().closed_form_s >= best_replay()) return;
    }
  }
  // The baselines as replayed, like the plan: one worker, and data
  // parallelism's own plan (under --straight too, where it is no candidate).
  void replayed_baselines(Plan& plan) {
    for (const PlanCandidate& c : search_.candidates) {
      if (c.family == "one-worker") plan.single_worker_s = c.replayed_s;
      if (c.family == "data-parallel") plan.data_parallel_s = c.replayed_s;
    }
    const int workers = topology_.total_workers();
    if (workers == 1) plan.data_parallel_s = plan.single_worker_s;
    if (!options_.straight || workers == 1) return;
    PlannerOptions dp = options_;
    dp.straight = false;
    dp.stage_replicas = workers;
    dp.explain_infeasible = false;
    try {
      plan.data_parallel_s = replay_time(plan_pipeline(profile_, topology_, dp), minibatches_, &profile_);
    } catch (const UserError&) {
      plan.data_parallel_s = NAN;  // does not fit in worker memory
    }
  }
  bool tight() const {
    return !search_.candidates.empty() &&
           search_.candidates[0].replayed_s <= search_.candidates[0].closed_form_s * (1 + 1e-9);
  }
  double best_replay() const {
    double best = INFINITY;
    for (const auto& c : search_.candidates) best = std::min(best, c.replayed_s);
    return best;
  }
  bool try_plan(const std::string& family, const PlannerOptions& o) {
    try {
      consider(family, plan_pipeline(profile_, topology_, o));
      return true;
    } catch (const UserError&) {
      if (!first_failure_) first_failure_ = std::current_exception();  // the unconstrained family's advice comes first
      return false;
    }
  }
  void consider(const std::string& family, Plan plan) {
    plan.closed_form_s = plan.time_per_minibatch_s;
    const double replayed = replay_time(plan, minibatches_, &profile_);
    search_.candidates.push_back({family, plan.config, plan.closed_form_s, replayed});
    plans_.push_back(std::move(plan));
  }

  static constexpr int kTighterOptima = 3, kTighterOptimaWorkers = 128;
  const Profile& profile_;
  const Topology& topology_;
  const PlannerOptions& options_;
  const int64_t minibatches_;
  PlanSearch search_;
  std::vector<Plan> plans_;
  std::exception_ptr first_failure_;
  double bound_ = 0;
};

}  // namespace

PlanSearch search_plan(const Profile& profile, const Topology& topology, const PlannerOptions& options,
                       int64_t minibatches) {
  if (options.cost_model == CostModel::pipedream) {
    PlanSearch search;
    search.plan = plan_pipeline(profile, topology, options);
    search.candidates.push_back({"pipedream", search.plan.config, search.plan.time_per_minibatch_s, 0});
    return search;
  }
  // A replay reaches its steady state only after many rounds of the widest
  // stage; past kMaxReplayWorkers workers that is too long a replay, and
  // the closed-form optimum is the answer.
  if (topology.total_workers() > kMaxReplayWorkers) {
    PlanSearch search;
    search.plan = plan_pipeline(profile, topology, options);
    search.plan.closed_form_s = search.plan.closed_form_bound_s = search.plan.time_per_minibatch_s;
    search.candidates.push_back({"optimum", search.plan.config, search.plan.time_per_minibatch_s, 0});
    return search;
  }
  // A memory limit that the unlimited choice fits changes nothing.
  const uint64_t limit = options.memory_bytes ? options.memory_bytes : topology.worker_memory_bytes;
  if (limit > 0) {
    PlannerOptions unlimited = options;
    unlimited.memory_bytes = 0;
    Topology any_memory = topology;
    any_memory.worker_memory_bytes = 0;
    PlanSearch free = Search(profile, any_memory, unlimited, minibatches).run();
    if (most_memory(free.plan) <= double(limit)) {
      free.plan.topology.worker_memory_bytes = limit;
      return free;
    }
  }
  return Search(profile, topology, options, minibatches).run();
}

}  // namespace pd
