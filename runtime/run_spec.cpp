#include "runtime/run_spec.h"

#include <algorithm>

#include "core/error.h"

namespace pd {

bool checkpoints_inside_schedule(const RunSpec& spec) {
  if (is_flush(spec.schedule.kind)) return true;
  return spec.schedule.kind == ScheduleKind::OneFOneBRoundRobin && spec.schedule.policy != WeightPolicy::None;
}

void require_clipping_supported(const RunSpec& spec) {
  if (spec.clip_grad_norm <= 0 || spec.plan.stages.size() == 1) return;
  const ScheduleKind k = spec.schedule.kind;
  if (is_flush(k) && k != ScheduleKind::TwoBW) return;
  throw UserError(cat("--clip-grad-norm needs the whole model's gradient at each optimizer step, which ",
                      to_string(spec.schedule.kind), " on ", spec.plan.stages.size(),
                      " stages never has (each stage steps on its own minibatches): use a synchronous schedule "
                      "(--schedule 1f1b-flush, gpipe, zb-h1 or interleaved-1f1b), or a one-stage plan"));
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
