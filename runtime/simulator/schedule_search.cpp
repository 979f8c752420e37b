#include "runtime/simulator/schedule_search.h"

#include <algorithm>
#include <chrono>

#include "core/error.h"
#include "core/text.h"
#include "planner/planning_graph.h"
#include "runtime/simulator/flush_fit.h"
#include "runtime/simulator/plan_search.h"
#include "runtime/simulator/simulator.h"
#include "runtime/simulator/worker_memory.h"

namespace pd {
namespace {

// The microbatch counts searched: those of W, 2W and 4W and the divisors of
// the batch between (interleaved: multiples of W only) that split the
// profile's batch evenly, as `run --batch B --microbatches M` requires; the
// smallest divisor above 4W (or the batch itself) where none does.
std::vector<int> microbatch_counts(int batch, int workers, bool interleaved) {
  std::vector<int> out;
  if (batch <= 0) return {workers, 2 * workers, 4 * workers};  // not recorded: any count
  for (int m = workers; m <= 4 * workers && m <= batch; ++m)
    if (batch % m == 0 && (!interleaved || m % workers == 0)) out.push_back(m);
  for (int m = 4 * workers + 1; out.empty() && m <= batch; ++m)
    if (batch % m == 0 && (!interleaved || m % workers == 0)) out.push_back(m);
  if (out.empty() && !interleaved) out.push_back(batch);  // fewer microbatches than workers
  return out;
}

ScheduleCandidate one_f_one_b_rr(const Profile& profile, const Topology& topology, const PlannerOptions& options) {
  ScheduleCandidate c;
  c.family = default_schedule_kind();
  try {
    PlanSearch search = search_plan(profile, topology, options);
    c.plan = search.plan;
    c.schedule.minibatches = replay_minibatches(c.plan);
    c.samples_per_s = c.plan.throughput_samples_per_s;
    c.time_per_batch_s = c.plan.time_per_minibatch_s;
    for (const PlanStage& st : c.plan.stages) c.peak_memory_bytes = std::max(c.peak_memory_bytes, double(st.memory_bytes));
    c.fits = true;
  } catch (const UserError& e) {
    c.note = e.what();
    c.failure = std::current_exception();
  }
  return c;
}

// The planner's straight optimum on `workers`, ignoring memory (checked
// per schedule afterwards).
Plan straight_plan(const Profile& profile, Topology topology, PlannerOptions options) {
  options.straight = true;
  options.fewer_workers = false;
  options.memory_bytes = 0;
  options.weight_versions = 0;
  topology.worker_memory_bytes = 0;
  return plan_pipeline(profile, topology, options);
}

// The family's best over its microbatch counts: at each, `fastest` (the
// optimum ignoring memory, on `stages`) where its replay fits the limit,
// else the fastest cut and recomputation that fit the schedule's memory
// at that count (flush_fit.h).
ScheduleCandidate best_flush(const Profile& profile, const Plan& fastest, const Topology& stages,
                             const PlannerOptions& options, const ScheduleKind* kind, int virtual_stages, int workers,
                             double limit) {
  ScheduleCandidate best;
  best.family = kind;
  const std::vector<int> counts = microbatch_counts(profile.batch_size, workers, virtual_stages > 1);
  if (counts.empty()) {
    best.note = cat("no multiple of the ", workers, " workers divides the profile's batch of ", profile.batch_size,
                    " into microbatches");
    return best;
  }
  const std::string none_fits = cat("no microbatch count fits the memory limit (",
                                    options.recompute == RecomputeMode::none ? "without recomputation"
                                                                             : "with recomputation",
                                    ")");
  best.note = none_fits;
  for (int m : counts) {
    ScheduleOptions schedule;
    schedule.kind = kind;
    schedule.microbatches = m;
    schedule.virtual_stages = virtual_stages;
    schedule.minibatches = kScheduleSearchBatches;
    FlushFit fit;
    try {
      fit = fit_flush_plan(profile, fastest, stages, options, schedule, limit);
    } catch (const UserError& e) {  // a count this schedule refuses (dualpipev: M >= 2p)
      if (!best.fits) best.note = e.what();
      continue;
    }
    best.least_memory_bytes = best.least_memory_bytes > 0 ? std::min(best.least_memory_bytes, fit.fastest_peak_bytes)
                                                          : fit.fastest_peak_bytes;
    if (!fit.fits) {
      if (!best.fits) best.note = none_fits;  // rather than a refused count's reason
      continue;
    }
    ScheduleCandidate c;
    c.family = kind;
    c.plan = fit.replay.plan;
    c.schedule = schedule;
    c.samples_per_s = fit.replay.report.throughput_samples_per_s;
    c.time_per_batch_s = fit.replay.report.time_per_minibatch_s;
    c.replayed = true;
    c.worker_memory_bytes = fit.replay.worker_memory_bytes;
    c.peak_memory_bytes = fit.replay.peak_memory_bytes;
    c.fits = true;
    if (!best.fits || c.time_per_batch_s < best.time_per_batch_s) {
      c.least_memory_bytes = best.least_memory_bytes;
      best = c;
    }
  }
  if (best.fits) best.least_memory_bytes = std::min(best.least_memory_bytes, best.peak_memory_bytes);
  return best;
}

}  // namespace

ScheduleSearch search_schedules(const Profile& profile, const Topology& topology, const PlannerOptions& options) {
  if (options.cost_model != CostModel::paper)
    throw UserError("--schedule auto searches with the paper cost model: drop --cost-model pipedream");
  ScheduleSearch out;
  out.families.push_back(one_f_one_b_rr(profile, topology, options));
  const double limit = double(options.memory_bytes ? options.memory_bytes : topology.worker_memory_bytes);
  const int workers = topology.total_workers();
  Plan straight;
  std::string why_not;
  try {
    straight = straight_plan(profile, topology, options);
  } catch (const UserError& e) {
    why_not = e.what();
  }
  const int layers = static_cast<int>(build_planning_graph(profile).nodes.size());
  // Every other searched schedule, each on the stage split that suits it:
  // one stage per worker, or `chunks` per worker placed as it says.
  for (const SearchedSchedule& searched : searched_schedules()) {
    const ScheduleKind* kind = searched.kind;
    const int virtual_stages = searched.virtual_stages, chunks = searched.stages_per_worker;
    ScheduleCandidate c;
    c.family = kind;
    if (chunks > 1) {
      if (topology.levels.size() != 1 || workers < 2) {
        c.note = cat(kind->name(), " is searched on flat topologies of 2 or more workers only");
      } else if (layers < chunks * workers) {
        c.note = cat(chunks, " stages on each of ", workers, " workers are ", chunks * workers, " stages, but ",
                     profile.model.empty() ? std::string("the model") : profile.model, " has ", layers,
                     " layers to cut between");
      } else {
        try {
          const Topology stages = flat_topology(chunks * workers, topology.levels.front().bandwidth_GBps);
          const Plan more = straight_plan(profile, stages, options);
          c = best_flush(profile, more, stages, options, kind, virtual_stages, workers, limit);
        } catch (const UserError& e) {
          c.note = cat("no plan of ", chunks * workers, " stages: ", e.what());
        }
      }
    } else if (straight.stages.empty()) {
      c.note = why_not;
    } else {
      c = best_flush(profile, straight, topology, options, kind, 1, workers, limit);
    }
    out.families.push_back(c);
  }
  for (size_t i = 0; i < out.families.size(); ++i)
    if (out.families[i].fits &&
        (out.chosen < 0 ||
         out.families[i].time_per_batch_s < out.families[static_cast<size_t>(out.chosen)].time_per_batch_s))
      out.chosen = static_cast<int>(i);
  return out;
}

std::optional<MemoryNeed> least_memory_any_schedule(const Profile& profile, const Topology& topology,
                                                    PlannerOptions options, uint64_t above, uint64_t start,
                                                    double seconds) {
  options.explain_infeasible = false;
  const auto fits = [&](uint64_t bytes) {
    options.memory_bytes = bytes;
    return search_schedules(profile, topology, options).chosen >= 0;
  };
  uint64_t lo = above, hi = std::max(start, above + 1);
  for (int doubling = 0; !fits(hi); ++doubling) {
    if (doubling == 6) return std::nullopt;
    lo = hi, hi *= 2;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (hi - lo > 1 && double(hi - lo) > 0.0005 * double(lo) && std::chrono::steady_clock::now() < deadline) {
    const uint64_t mid = lo + (hi - lo) / 2;
    (fits(mid) ? hi : lo) = mid;
  }
  return MemoryNeed{lo, hi};
}

}  // namespace pd
