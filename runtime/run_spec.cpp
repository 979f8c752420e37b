#include "runtime/run_spec.h"

#include <algorithm>

#include "core/error.h"

namespace pd {

bool checkpoints_inside_schedule(const RunSpec& spec) {
  // The flush schedules always stash (one version per batch); 1f1b-rr
  // without versions cannot recompute a checkpoint's minibatches.
  return spec.schedule.policy != WeightPolicy::None;
}

void require_clipping_supported(const RunSpec& spec) {
  if (spec.clip_grad_norm <= 0 || spec.plan.stages.size() == 1) return;
  require_whole_model_gradient(spec.schedule, static_cast<int>(spec.plan.stages.size()), "--clip-grad-norm");
}

std::vector<Segment> run_segments(const RunSpec& spec, int64_t start_step) {
  std::vector<Segment> out;
  const int64_t total = spec.steps();
  for (int64_t s = start_step; s < total;) {
    int64_t e = total;
    if (spec.checkpoint_every > 0 && !checkpoints_inside_schedule(spec)) e = std::min(total, (s / spec.checkpoint_every + 1) * spec.checkpoint_every);
    out.push_back({s, e});
    s = e;
  }
  return out;
}

std::vector<int64_t> evaluation_points(const RunSpec& spec, int64_t train_size) {
  std::vector<int64_t> out;
  if (!spec.evaluate) return out;
  const int64_t every = spec.eval_every > 0 ? spec.eval_every : spec.steps_per_epoch(train_size);
  if (every > 0)
    for (int64_t p = every; p < spec.steps(); p += every) out.push_back(p);
  out.push_back(spec.steps());
  return out;
}

}  // namespace pd
