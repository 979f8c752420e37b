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
Plan straight_plan(const Profile& profile, Topology topology, PlannerOptions options) {
  options.straight = true;
  options.fewer_workers = false;
  options.memory_bytes = 0;
  topology.worker_memory_bytes = 0;
  return plan_pipeline(profile, topology, options);
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
    so.stashed_bytes = stashed_bytes_from_profile(plan, profile);
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
    if (!best.fits || c.samples_per_s > best.samples_per_s) {
      c.least_memory_bytes = best.least_memory_bytes;
      best = c;
    }
  }
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
  // Every other searched registry entry, each on the stage split that suits
  // it: one stage per worker, or `chunks` per worker placed as it says.
  for (const ScheduleKind* kind : schedule_kinds()) {
    if (!kind->searched() || kind == default_schedule_kind()) continue;  // 1f1b-rr: the planner's search above
    const int virtual_stages = kind->takes_virtual_stages() ? 2 : 1;
    const int chunks = kind->chunks(virtual_stages);
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
          c = best_flush(profile, more, kind, virtual_stages, workers, limit);
        } catch (const UserError& e) {
          c.note = cat("no plan of ", chunks * workers, " stages: ", e.what());
        }
      }
    } else if (straight.stages.empty()) {
      c.note = why_not;
    } else {
      c = best_flush(profile, straight, kind, 1, workers, limit);
    }
    out.families.push_back(c);
  }
  for (size_t i = 0; i < out.families.size(); ++i)
    if (out.families[i].fits &&
        (out.chosen < 0 || out.families[i].samples_per_s > out.families[static_cast<size_t>(out.chosen)].samples_per_s))
      out.chosen = static_cast<int>(i);
  return out;
}

}  // namespace pd
