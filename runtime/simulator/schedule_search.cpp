#include "runtime/simulator/schedule_search.h"

#include <algorithm>

#include "core/error.h"
#include "core/text.h"
#include "runtime/simulator/plan_search.h"
#include "runtime/simulator/simulator.h"

namespace pd {
namespace {

// One stage's footprint from the profile (chain plans).
struct Footprint {
  double parameters = 0, optimizer_state = 0, activations = 0, boundary = 0, workspace = 0;
};

Footprint footprint(const Profile& profile, const PlanStage& st) {
  Footprint f;
  for (int l = st.first_layer; l <= st.last_layer; ++l) {
    const ProfileNode& n = profile.nodes.at(static_cast<size_t>(l));
    f.parameters += double(n.parameter_bytes);
    f.optimizer_state += double(n.optimizer_state_bytes);
    f.activations += double(n.activation_bytes);
    f.workspace = std::max(f.workspace, double(n.workspace_bytes));
  }
  f.boundary = double(st.output_bytes);
  return f;
}

// The fullest worker's bytes under a synchronous (or 2bw) schedule.
double peak_memory(const Profile& profile, const Plan& plan, const ScheduleOptions& o, const SimulationReport& rep) {
  const Schedule schedule(plan, o);
  const double versions = o.kind->weight_versions(), m = o.microbatches;
  double peak = 0;
  for (const WorkerReport& w : rep.workers) {
    double fixed = 0, per_item = 0, workspace = 0;
    for (int c = 0; c < schedule.chunks(); ++c) {
      const Footprint f = footprint(profile, plan.stages[static_cast<size_t>(schedule.stage_of(w.rank, c))]);
      fixed += f.parameters * (versions + 1) + f.optimizer_state;
      per_item = std::max(per_item, (f.activations + 2 * f.boundary) / m);
      workspace = std::max(workspace, f.workspace / m);
    }
    peak = std::max(peak, fixed + double(w.peak_held) * per_item + workspace);
  }
  return peak;
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
  best.note = "no microbatch count fits the memory limit";
  const std::vector<uint64_t> stashed = stashed_bytes_from_profile(plan, profile);
  for (int m : {workers, 2 * workers, 4 * workers}) {
    ScheduleCandidate c;
    c.family = best.family;
    c.plan = plan;
    c.schedule.kind = kind;
    c.schedule.microbatches = m;
    c.schedule.virtual_stages = virtual_stages;
    c.schedule.minibatches = kScheduleSearchBatches;
    SimulationOptions so;
    so.schedule = c.schedule;
    so.stashed_bytes = stashed;
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
    c.peak_memory_bytes = peak_memory(profile, plan, c.schedule, rep);
    c.fits = limit <= 0 || c.peak_memory_bytes <= limit;
    if (!c.fits) {
      if (!best.fits) best.note = "no microbatch count fits the memory limit";  // rather than a refused count's reason
      continue;
    }
    if (!best.fits || c.samples_per_s > best.samples_per_s) best = c;
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
  const bool chain = !straight.stages.empty() && std::all_of(straight.stages.begin(), straight.stages.end(),
                                                              [](const PlanStage& s) { return s.nodes.empty(); });
  // Every other searched registry entry, each on the stage split that suits
  // it: one stage per worker, or `chunks` per worker placed as it says.
  for (const ScheduleKind* kind : schedule_kinds()) {
    if (!kind->searched() || kind == default_schedule_kind()) continue;  // 1f1b-rr: the planner's search above
    const int virtual_stages = kind->takes_virtual_stages() ? 2 : 1;
    const int chunks = kind->chunks(virtual_stages);
    ScheduleCandidate c;
    c.family = kind;
    if (!chain) {
      c.note = why_not.empty() ? "the synchronous families are searched for layer chains only" : why_not;
    } else if (chunks > 1) {
      if (topology.levels.size() != 1 || workers < 2) {
        c.note = cat(kind->name(), " is searched on flat topologies of 2 or more workers only");
      } else {
        try {
          const Plan more = straight_plan(
              profile, flat_topology(chunks * workers, topology.levels.front().bandwidth_GBps), options);
          c = best_flush(profile, more, kind, virtual_stages, workers, limit);
        } catch (const UserError& e) {
          c.note = cat("no plan of ", chunks * workers, " stages: ", e.what());
        }
      }
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
