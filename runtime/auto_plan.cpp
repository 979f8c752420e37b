#include "runtime/auto_plan.h"

#include <algorithm>

#include "core/error.h"
#include "planner/planner.h"
#include "core/text.h"
#include "runtime/simulator/flush_fit.h"
#include "runtime/simulator/plan_search.h"
#include "profiler/measure.h"
#include "runtime/simulator/simulator.h"

namespace pd {

Profile measure_layer_profile(const Model& m, int64_t batch, int threads, const OptimizerConfig& optimizer,
                              Device device, Precision precision, bool allow_tf32) {
  ProfileOptions o;
  o.precision = precision;
  o.allow_tf32 = allow_tf32;
  o.batch = batch;
  o.device = device;
  o.threads = threads;
  o.warmup = 2;
  o.iters = 5;
  o.optimizer = optimizer;
  return measure_profile(m, o);
}

Plan plan_for_workers(const Profile& p, int workers, bool straight, int threads_per_worker, int cores,
                      double bandwidth_GBps, uint64_t memory_bytes, RecomputeMode recompute,
                      const ScheduleOptions* flushing, int64_t batch) {
  if (workers < 1) throw UserError(cat("--workers must be >= 1, got ", workers));
  if (straight && workers > static_cast<int>(p.nodes.size()))
    throw UserError(cat("--straight with ", workers, " workers needs at least as many profile nodes (layers, or an "
                        "imported graph's units: `pipedream models --model M` counts both); ", p.model, " has ",
                        p.nodes.size()));
  PlannerOptions o;
  o.straight = straight;
  o.memory_bytes = memory_bytes;
  o.recompute = recompute;
  Plan plan;
  if (flushing && memory_bytes > 0) {
    // The schedule's own memory prices the cut and recomputation (flush_fit.h).
    const Topology topology = flat_topology(workers, bandwidth_GBps);
    PlannerOptions fastest = o;
    fastest.straight = true;
    fastest.memory_bytes = 0;
    plan = search_plan(p, topology, fastest).plan;
    plan.batch = batch;
    ScheduleOptions schedule = *flushing;
    schedule.minibatches = 16;
    const FlushFit fit = fit_flush_plan(p, plan, topology, o, schedule, double(memory_bytes));
    if (!fit.fits)
      throw UserError(cat("--memory ", bytes_text(double(memory_bytes)), ": ", fit.note,
                          " (the plan ignoring memory needs ", bytes_text(fit.fastest_peak_bytes),
                          " on its fullest worker",
                          recompute == RecomputeMode::none ? "; --recompute auto may fit it" : "", ")"));
    plan = fit.replay.plan;
    plan.topology.worker_memory_bytes = memory_bytes;
  } else {
    plan = search_plan(p, flat_topology(workers, bandwidth_GBps), o).plan;
  }
  plan.profile.model = p.model;
  plan.profile.batch_size = p.batch_size;
  plan.profile.device = p.device;
  if (cores > 0) {
    double compute = 0;
    for (const ProfileNode& n : p.nodes) compute += (n.forward_ms + n.backward_ms) / 1e3;
    plan.shared_cores_bound_s = compute * threads_per_worker / cores;
    // The bound assumes the cores never idle; the replay with shared cores
    // also sees the pipeline's dependencies (fill, drain, a stage waiting
    // while too few others compute), and measured runs follow it
    // (runtime/simulator/README.md). It is never below the bound.
    SimulationOptions o;
    o.schedule.kind = parse_schedule_kind(plan.schedule);
    o.schedule.minibatches = replay_minibatches(plan);
    o.cores = cores;
    o.threads_per_worker = threads_per_worker;
    const double shared = std::max(simulate(plan, o).time_per_minibatch_s, plan.shared_cores_bound_s);
    if (shared > plan.time_per_minibatch_s * (1 + 1e-6)) set_predicted_time(plan, shared, PredictedBy::shared_cores);
  }
  return plan;
}

double flush_samples_per_s(const Plan& plan, const ScheduleOptions& schedule, int threads_per_worker, int cores) {
  // The Schedule the replay builds refuses what cannot run on this plan
  // (1f1b-rr with microbatches, a plan of the wrong stage count).
  Plan batch = plan;  // a batch is microbatches x the profiled batch
  batch.profile.batch_size = plan.profile.batch_size * schedule.microbatches;
  SimulationOptions o;
  o.schedule = schedule;
  o.schedule.minibatches = 16;  // batches: steady state between the 4th and the 12th
  for (const PlanStage& st : plan.stages) o.microbatch_times.push_back({st.forward_s, st.backward_s});
  if (cores > 0) {
    o.cores = cores;
    o.threads_per_worker = threads_per_worker;
  }
  return simulate(batch, o).throughput_samples_per_s;
}

}  // namespace pd
