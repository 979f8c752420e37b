#pragma once
// `pipedream run --plan auto --workers N`: profile the model here with the
// profiler (the run's batch and threads per worker), then plan it for N
// workers on this machine - the quick start in one command.
#include <cstdint>

#include "core/optimizer.h"
#include "models/model.h"
#include "planner/plan.h"
#include "planner/recompute.h"
#include "profiler/profile.h"
#include "runtime/schedule/schedule.h"

namespace pd {

// profiler/measure.h with the run's settings (on the run's device, in its
// precision, with TF32 when the run allows it).
Profile measure_layer_profile(const Model& m, int64_t batch, int threads, const OptimizerConfig& optimizer,
                              Device device = Device::cpu(), Precision precision = Precision::FP32,
                              bool allow_tf32 = false);
// Plans `workers` workers on one machine (flat topology, bandwidth_GBps
// between workers: shared-memory MPI); `straight`: one worker per stage.
// The workers share the machine's `cores` (0: unknown): a minibatch's
// compute, summed over its stages, takes at least that many core-seconds x
// threads_per_worker, so no plan does better than total compute x threads
// / cores per minibatch (Plan::shared_cores_bound_s, kept in plan.json).
// When workers x threads exceed the cores, the prediction is the plan's
// replay with the cores shared (SimulationOptions::cores; never below the
// bound), predicted_by "shared cores", if slower than the own-device replay.
// memory_bytes (0: none) and recompute as PlannerOptions' (`run --memory`, `--recompute`).
// `flushing` (a schedule that flushes, `run --plan auto --schedule X`,
// with the profile measured at its microbatch of `batch` / M): the plan is
// straight, and under a memory limit its cut and recomputed layers are
// chosen by X's own memory at M microbatches (runtime/simulator/flush_fit.h);
// UserError when none fits.
Plan plan_for_workers(const Profile& p, int workers, bool straight = false, int threads_per_worker = 1,
                      int cores = 0, double bandwidth_GBps = 4.0, uint64_t memory_bytes = 0,
                      RecomputeMode recompute = RecomputeMode::none, const ScheduleOptions* flushing = nullptr,
                      int64_t batch = 0);

// A flush schedule (gpipe, 1f1b-flush, zb-h1) run on a plan profiled at
// its microbatch - what `run --plan auto` profiles for a flush run, the
// run's --batch / M: the replay of schedule.microbatches microbatches
// per batch, each costing the plan's stage times as profiled, with the
// cores shared as in plan_for_workers. Samples/s of the whole batches.
double flush_samples_per_s(const Plan& plan, const ScheduleOptions& schedule, int threads_per_worker = 1,
                           int cores = 0);

}  // namespace pd
