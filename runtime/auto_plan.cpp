#include "runtime/auto_plan.h"

#include "core/error.h"
#include "planner/planner.h"
#include "profiler/measure.h"

namespace pd {

Profile measure_layer_profile(const Model& m, int64_t batch, int threads, const OptimizerConfig& optimizer,
                              Device device) {
  ProfileOptions o;
  o.batch = batch;
  o.device = device;
  o.threads = threads;
  o.warmup = 2;
  o.iters = 5;
  o.optimizer = optimizer;
  return measure_profile(m, o);
}

Plan plan_for_workers(const Profile& p, int workers, bool straight, double bandwidth_GBps) {
  if (workers < 1) throw UserError(cat("--workers must be >= 1, got ", workers));
  if (straight && workers > static_cast<int>(p.nodes.size()))
    throw UserError(cat("--straight with ", workers, " workers needs at least as many layers; ", p.model, " has ",
                        p.nodes.size()));
  PlannerOptions o;
  o.straight = straight;
  Plan plan = plan_pipeline(p, flat_topology(workers, bandwidth_GBps), o);
  plan.profile.model = p.model;
  plan.profile.batch_size = p.batch_size;
  plan.profile.device = p.device;
  return plan;
}

}  // namespace pd
