// What callers outside runtime/schedule ask about a schedule (schedule.h's
// last section): descriptions, flag checks and refusals, from the kind.
#include <algorithm>
#include <numeric>

#include "core/error.h"
#include "runtime/schedule/schedule.h"

namespace pd {

std::string schedule_title(const ScheduleOptions& o) {
  std::string t = o.kind->name();
  if (o.kind->takes_weight_policy()) t += " (" + to_string(o.policy) + ")";
  if (o.virtual_stages > 1) t += cat(" (", o.virtual_stages, " virtual stages per worker)");
  return t;
}

std::string schedule_summary(const ScheduleOptions& o, int64_t microbatch_size) {
  const int64_t batch = microbatch_size * o.microbatches;
  if (o.kind->flushes())
    return cat(o.kind->name(), ", batches of ", batch, ": ", o.microbatches, " microbatches of ", microbatch_size);
  return cat(o.kind->name(), ", weights ", to_string(o.policy), ", batch ", batch);
}

std::string steps_phrase(const ScheduleOptions& o, int64_t steps) {
  if (o.kind->flushes()) return cat(steps, " batches of ", o.microbatches, " microbatches");
  return cat(steps, " minibatches");
}

std::string schedule_flags(const ScheduleOptions& o) {
  std::string f = cat("--schedule ", o.kind->name());
  if (o.kind->takes_weight_policy() && o.policy != WeightPolicy::Stash) f += " --weights " + to_string(o.policy);
  if (o.kind->flushes()) f += cat(" --microbatches ", o.microbatches);
  if (o.virtual_stages > 1) f += cat(" --virtual-stages ", o.virtual_stages);
  return f;
}

const char* step_noun(const ScheduleOptions& o) { return o.kind->flushes() ? "batch" : "minibatch"; }

int64_t steps_per_period(const ScheduleKind* kind, int workers) { return kind->flushes() ? 1 : workers + 1; }

int microbatches_for(const ScheduleKind* kind, int given, int workers, const std::function<int(int multiple)>& fallback) {
  if (given < 0) throw UserError(cat("--microbatches must be >= 1, got ", given));
  if (!kind->flushes()) {
    if (given > 1)
      throw UserError(cat("--microbatches applies to ", schedule_names([](const ScheduleKind& k) { return k.flushes(); }),
                          ", not ", kind->name(), " (which runs whole minibatches)"));
    return 1;
  }
  return given > 0 ? given : fallback(kind->microbatch_multiple(workers));
}

namespace {

// The flush schedules step every stage on the same batch; 2bw and 1f1b-rr
// step stages on their own items.
bool synchronous(const ScheduleKind& k) { return k.flushes() && !k.never_drains(); }

}  // namespace

void require_whole_model_gradient(const ScheduleOptions& o, int stages, const std::string& flag) {
  if (stages == 1 || synchronous(*o.kind)) return;
  throw UserError(cat(flag, " needs the whole model's gradient at each optimizer step, which ", o.kind->name(),
                      " on ", stages, " stages never has (each stage steps on its own minibatches): use a "
                      "synchronous schedule (--schedule ", schedule_names(synchronous), "), or a one-stage plan"));
}

void require_checkpoints(const ScheduleOptions& o, const std::string& flag) {
  if (o.kind->checkpoints()) return;
  throw UserError(cat(o.kind->name(), " runs do not checkpoint or resume yet (", flag, "): use ",
                      schedule_names([](const ScheduleKind& k) { return k.checkpoints(); })));
}

void require_split_backward(const ScheduleOptions& o, const std::string& flag) {
  if (o.kind->splits_backward()) return;
  throw UserError(cat(flag, " applies to ", schedule_names([](const ScheduleKind& k) { return k.splits_backward(); }),
                      " only (the schedule is ", o.kind->name(), ")"));
}

int64_t rounds_after(const ScheduleOptions& o, int replicas, int64_t steps) {
  return o.kind->flushes() ? steps : (steps + replicas - 1) / replicas;
}

int64_t version_stride(const ScheduleOptions& o, int replicas) { return o.kind->flushes() ? 1 : replicas; }

bool drained_between_steps(const ScheduleOptions& o) { return o.kind->flushes(); }

std::string schedule_flag_help() { return cat("the schedule (default: the plan's):", schedule_help()); }

std::string weights_flag_help() {
  return cat(schedule_names([](const ScheduleKind& k) { return k.takes_weight_policy(); }),
             " weight policy: stash (default) | vertical | none");
}

std::string virtual_stages_flag_help() {
  return cat(schedule_names([](const ScheduleKind& k) { return k.takes_virtual_stages(); }),
             ": stages per worker; the plan's stage k runs on worker k mod (stages / v)");
}

std::string microbatches_flag_help(const std::string& what) {
  return cat(schedule_names([](const ScheduleKind& k) { return k.flushes(); }), ": ", what);
}

std::string split_backward_flag_help(const std::string& what) {
  return cat(schedule_names([](const ScheduleKind& k) { return k.splits_backward(); }), ": ", what);
}

std::vector<std::pair<std::string, std::string>> schedule_fields(const ScheduleOptions& o) {
  std::vector<std::pair<std::string, std::string>> f{{"schedule", o.kind->name()}};
  if (o.kind->takes_weight_policy()) f.emplace_back("weights", to_string(o.policy));
  return f;
}

void require_tied_stages_step_together(const ScheduleKind* kind, const std::string& tie, const std::string& or_else) {
  if (synchronous(*kind)) return;
  throw UserError(cat(tie, ", but ", kind->name(),
                      " steps each stage on its own minibatches at its own time, so the copies would take "
                      "different updates and drift apart: use a synchronous schedule (--schedule ",
                      schedule_names(synchronous), "), which sums the tied gradient once per step, or ", or_else));
}

std::string plan_memory_differs(const Plan& plan, const ScheduleOptions& o) {
  const bool flush = o.kind->flushes();
  const bool planned_default = plan.schedule == default_schedule_kind()->name();
  const bool same = plan.schedule == o.kind->name() &&
                    (flush ? plan.microbatches == o.microbatches : o.policy == WeightPolicy::Stash);
  if (same) return "";
  return cat("the plan's figure is for ", plan.schedule,
             planned_default         ? std::string(" with stashed weights")
             : plan.microbatches > 0 ? cat(" at ", plan.microbatches, " microbatches")
                                     : std::string(),
             ", not ", o.kind->name(),
             !flush ? " with weights " + to_string(o.policy) : cat(" at ", o.microbatches, " microbatches"));
}

std::string plan_time_differs(const Plan& plan, const ScheduleOptions& o) {
  const bool flush = o.kind->flushes();
  const bool planned_default = plan.schedule == default_schedule_kind()->name();
  const bool same = plan.schedule == o.kind->name() &&
                    (!flush || (plan.microbatches == o.microbatches &&
                                std::max(1, plan.virtual_stages) == std::max(1, o.virtual_stages)));
  if (same) return "";
  const std::string run_schedule =
      cat(o.kind->name(), flush ? cat(" at ", o.microbatches, " microbatches") : std::string(),
          o.virtual_stages > 1 ? cat(", ", o.virtual_stages, " virtual stages") : std::string());
  return cat("the plan predicts ", plan.schedule,
             !planned_default && plan.microbatches > 0 ? cat(" at ", plan.microbatches, " microbatches") : std::string(),
             !planned_default && plan.microbatches == 0 ? " (microbatches not recorded)" : "", ", this run is ",
             run_schedule, " (`pipedream simulate ", schedule_flags(o), "` predicts it)");
}

std::vector<SearchedSchedule> searched_schedules() {
  std::vector<SearchedSchedule> out;
  for (const ScheduleKind* kind : schedule_kinds()) {
    if (!kind->searched() || kind == default_schedule_kind()) continue;
    const int virtual_stages = kind->takes_virtual_stages() ? 2 : 1;
    out.push_back({kind, virtual_stages, kind->chunks(virtual_stages)});
  }
  return out;
}

std::string searched_schedule_names(const char* last) {
  return schedule_names([](const ScheduleKind& k) { return k.searched(); }, last);
}

}  // namespace pd
