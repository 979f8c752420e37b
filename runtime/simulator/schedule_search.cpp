#include "runtime/simulator/schedule_search.h"

#include <algorithm>

#include "core/error.h"
#include "core/text.h"
#include "planner/planning_graph.h"
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
// per schedule afterwards); nullopt-like empty plan when there is none.
// With a stage limit: the fastest whose every stage fits it holding
// `weight_versions` weight versions and one minibatch's activations
// (PlannerOptions::weight_versions), which bounds the schedule's figure
// above as long as a stage holds at most its minibatch's microbatches.
Plan straight_plan(const Profile& profile, Topology topology, PlannerOptions options, double stage_limit = 0,
                   int weight_versions = 0) {
  options.straight = true;
  options.fewer_workers = false;
  options.memory_bytes = uint64_t(stage_limit);
  options.weight_versions = stage_limit > 0 ? weight_versions : 0;
  if (stage_limit > 0) options.explain_infeasible = false;
  topology.worker_memory_bytes = 0;
  Plan plan = plan_pipeline(profile, topology, options);
  plan.topology.worker_memory_bytes = 0;  // (recorded as the unlimited optimum's)
  return plan;
}

ScheduleCandidate best_flush(const Profile& profile, const Plan& plan, const ScheduleKind* kind, int virtual_stages,
                             int workers, double limit) {
  ScheduleCandidate best;
  best.family = kind;
  const std::vector<int> counts = microbatch_counts(profile.batch_size, workers, virtual_stages > 1);
  if (counts.empty()) {
    best.note = cat("no multiple of the ", workers, " workers divides the profile's batch of ", profile.batch_size,
                    " into microbatches");
    return best;
  }
  best.note = "no microbatch count fits the memory limit";
  for (int m : counts) {
    ScheduleCandidate c;
    c.family = best.family;
    c.plan = plan;
    c.schedule.kind = kind;
    c.schedule.microbatches = m;
    c.schedule.virtual_stages = virtual_stages;
    c.schedule.minibatches = kScheduleSearchBatches;
    SimulationOptions so;
    so.schedule = c.schedule;
    set_memory_from_profile(so, plan, profile);
    if (profile.batch_size % m == 0)
      so.microbatch_times = microbatch_times_from_profile(plan, profile, profile.batch_size / m);
    SimulationReport rep;
    try {
      rep = simulate(plan, so);
    } catch (const UserError& e) {  // a count this schedule refuses (dualpipev: M >= 2p)
      if (!best.fits) best.note = e.what();
      continue;
    }
    c.samples_per_s = rep.throughput_samples_per_s;
    c.time_per_batch_s = rep.time_per_minibatch_s;
    c.replayed = true;
    c.worker_memory_bytes = predicted_worker_memory(plan, profile, rep);
    for (double b : c.worker_memory_bytes) c.peak_memory_bytes = std::max(c.peak_memory_bytes, b);
    best.least_memory_bytes = best.least_memory_bytes > 0 ? std::min(best.least_memory_bytes, c.peak_memory_bytes)
                                                          : c.peak_memory_bytes;
    c.fits = limit <= 0 || c.peak_memory_bytes <= limit;
    if (!c.fits) {
      if (!best.fits) best.note = "no microbatch count fits the memory limit";  // rather than a refused count's reason
      continue;
    }
    if (!best.fits || c.time_per_batch_s < best.time_per_batch_s) {
      c.least_memory_bytes = best.least_memory_bytes;
      best = c;
    }
  }
  return best;
}

// The fastest cut ignoring memory can put more layers on a stage than the
// limit holds (uneven layer times) where an even cut fits: then the fastest
// cut whose stages fit (`chunks` stages share a worker, a share of the
// limit each). `fastest` is kept when that does not fit either (its note
// and least memory say what would).
ScheduleCandidate fitting_flush(const Profile& profile, const Topology& topology, const PlannerOptions& options,
                                ScheduleCandidate fastest, const SearchedSchedule& searched, int workers, double limit) {
  if (fastest.fits || !(limit > 0)) return fastest;
  const ScheduleKind* kind = searched.kind;
  const int virtual_stages = searched.virtual_stages, chunks = searched.stages_per_worker;
  const Topology stages = chunks > 1 ? flat_topology(chunks * workers, topology.levels.front().bandwidth_GBps) : topology;
  try {
    const Plan fitting = straight_plan(profile, stages, options, limit / chunks, searched.weight_versions);
    ScheduleCandidate c = best_flush(profile, fitting, kind, virtual_stages, workers, limit);
    if (c.fits) return c;
  } catch (const UserError&) {  // no cut fits the limit under this model
  }
  return fastest;
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
          const Plan more = straight_plan(
              profile, flat_topology(chunks * workers, topology.levels.front().bandwidth_GBps), options);
          c = fitting_flush(profile, topology, options, best_flush(profile, more, kind, virtual_stages, workers, limit),
                            searched, workers, limit);
        } catch (const UserError& e) {
          c.note = cat("no plan of ", chunks * workers, " stages: ", e.what());
        }
      }
    } else if (straight.stages.empty()) {
      c.note = why_not;
    } else {
      c = fitting_flush(profile, topology, options, best_flush(profile, straight, kind, 1, workers, limit), searched,
                        workers, limit);
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

}  // namespace pd
