#include "runtime/simulator/flush_fit.h"

#include <algorithm>

#include "core/error.h"
#include "core/text.h"
#include "runtime/simulator/worker_memory.h"

namespace pd {
namespace {

// An item's share of the profile's batch (worker_memory.h's stage_footprints).
double item_share(const Plan& plan, const Profile& profile, int microbatches) {
  const int64_t batch = plan.batch > 0 ? plan.batch : profile.batch_size;
  if (profile.batch_size > 0 && batch > 0)
    return double(batch) / std::max(1, microbatches) / double(profile.batch_size);
  return 1.0 / std::max(1, microbatches);
}

bool profiled_at_microbatch(const Plan& plan, const Profile& profile) {
  return plan.batch > 0 && profile.batch_size > 0 && plan.batch != profile.batch_size;
}

}  // namespace

FlushReplay replay_flush(const Plan& plan, const Profile& profile, const ScheduleOptions& schedule) {
  FlushReplay out;
  out.plan = plan;
  SimulationOptions so;
  so.schedule = schedule;
  set_memory_from_profile(so, plan, profile);
  Plan replayed = plan;
  const int m = schedule.microbatches;
  if (profiled_at_microbatch(plan, profile)) {
    // (predicted_stage_memory's scaling: an item gets its share of the batch's output)
    replayed.profile.batch_size = plan.batch;
    for (PlanStage& st : replayed.stages) {
      st.output_bytes = uint64_t(double(st.output_bytes) * double(plan.batch) / double(profile.batch_size));
      so.microbatch_times.push_back({st.forward_s, st.backward_s});
    }
  } else if (profile.batch_size > 0 && m > 0 && profile.batch_size % m == 0) {
    so.microbatch_times = microbatch_times_from_profile(plan, profile, profile.batch_size / m);
  }
  out.report = simulate(replayed, so);
  out.worker_memory_bytes = predicted_worker_memory(plan, profile, out.report);
  for (double b : out.worker_memory_bytes) out.peak_memory_bytes = std::max(out.peak_memory_bytes, b);
  return out;
}

FlushFit fit_flush_plan(const Profile& profile, const Plan& fastest, const Topology& stages, PlannerOptions options,
                        const ScheduleOptions& schedule, double limit) {
  FlushFit out;
  out.replay = replay_flush(fastest, profile, schedule);
  out.fastest_peak_bytes = out.replay.peak_memory_bytes;
  out.fits = !(limit > 0) || out.replay.peak_memory_bytes <= limit;
  if (out.fits) return out;
  // What each stage's rank holds at its peak, from the replay above.
  const Schedule placed(fastest, schedule);
  std::vector<int64_t> held_by_rank(size_t(placed.workers()), 1);
  for (const WorkerReport& w : out.replay.report.workers)
    if (size_t(w.rank) < held_by_rank.size()) held_by_rank[size_t(w.rank)] = std::max<int64_t>(1, w.peak_held);
  const double share = item_share(fastest, profile, schedule.microbatches);
  options.straight = true;
  options.fewer_workers = false;
  options.explain_infeasible = false;
  options.stage_replicas = 0;
  options.weight_versions = std::max(1, placed.versions_kept());
  options.item_share = share;

  const int chunks = std::max(1, placed.chunks());
  // A worker running several stages holds their items together: each is
  // planned with an even share of them (else, where that fails, with all).
  const auto hold = [&](int divisor) {
    options.held_minibatches.clear();
    for (int s = 0; s < int(fastest.stages.size()); ++s)
      options.held_minibatches.push_back(double(held_by_rank[size_t(placed.place(s).worker)]) * share / divisor);
  };
  Topology unlimited = stages;
  unlimited.worker_memory_bytes = 0;
  out.note = cat("no cut", options.recompute == RecomputeMode::none ? "" : " or recomputation",
                 " fits the memory limit under ", schedule.kind->name(), " at ", schedule.microbatches,
                 " microbatches");
  const auto fit = [&](const PlannerOptions& planned) {
    double stage_limit = limit / chunks;
    PlannerOptions o = planned;
    for (int attempt = 0; attempt < 4 && stage_limit >= 1; ++attempt) {
      o.memory_bytes = uint64_t(stage_limit);
      Plan plan;
      try {
        plan = plan_pipeline(profile, unlimited, o);
      } catch (const UserError&) {  // no cut fits under the planner's model
        return false;
      }
      plan.topology.worker_memory_bytes = 0;  // (the planner's share, not the limit)
      plan.batch = fastest.batch;
      FlushReplay r = replay_flush(plan, profile, schedule);
      if (r.peak_memory_bytes <= limit) {
        out.replay = std::move(r);
        out.fits = true;
        return true;
      }
      // The replay holds more than the model (messages in flight): ask for less.
      stage_limit -= std::max(r.peak_memory_bytes - limit, 0.002 * limit) / chunks;
    }
    return false;
  };
  // Recomputation's extra forward can slow a stage enough that messages
  // pile up before it: where recomputing plans fail, a cut that recomputes
  // nothing may still fit (auto must fit wherever none does).
  std::vector<RecomputeMode> modes = {options.recompute};
  if (options.recompute == RecomputeMode::automatic) modes.push_back(RecomputeMode::none);
  for (const RecomputeMode mode : modes)
    for (const int divisor : chunks > 1 ? std::vector<int>{chunks, 1} : std::vector<int>{1}) {
      options.recompute = mode;
      hold(divisor);
      if (fit(options)) return out;
    }
  return out;
}

}  // namespace pd
