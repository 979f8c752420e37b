#include "runtime/schedule/schedule_kind.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/schedule/schedule.h"

namespace pd {

void ScheduleKind::check(const Plan&, const ScheduleOptions&) const {}

// Ordered schedules: what the worker's order holds between F and B; the
// generic order: 1F1B's warm-up forwards + 1.
int64_t ScheduleKind::in_flight_limit(const Schedule& schedule, int rank) const {
  if (schedule.ordered()) return schedule.order_peak(rank, false);
  return schedule.warmup(schedule.stage_of(rank)) + 1;
}

// Ordered schedules: what the worker's order holds; the others hold no
// tensors past B.
int64_t ScheduleKind::held_limit(const Schedule& schedule, int rank) const {
  if (schedule.ordered()) return schedule.order_peak(rank, splits_backward());
  return schedule.in_flight_limit(rank);
}

const ScheduleKind* parse_schedule_kind(std::string_view name) {
  for (const ScheduleKind* k : schedule_kinds())
    if (name == k->name()) return k;
  throw UserError(cat("unknown schedule '", name, "': use ", schedule_names()));
}

const ScheduleKind* default_schedule_kind() { return schedule_kinds().front(); }

std::string schedule_names(bool (*keep)(const ScheduleKind&), const char* last) {
  std::vector<const char*> names;
  for (const ScheduleKind* k : schedule_kinds())
    if (!keep || keep(*k)) names.push_back(k->name());
  std::string out;
  for (size_t i = 0; i < names.size(); ++i)
    out += cat(i == 0 ? "" : i + 1 == names.size() ? last : ", ", names[i]);
  return out;
}

std::string schedule_help() {
  size_t width = 0;
  for (const ScheduleKind* k : schedule_kinds()) width = std::max(width, std::string_view(k->name()).size());
  std::string out;
  for (const ScheduleKind* k : schedule_kinds())
    out += cat("\n  ", k->name(), std::string(width + 2 - std::string_view(k->name()).size(), ' '), k->help());
  return out;
}

}  // namespace pd
