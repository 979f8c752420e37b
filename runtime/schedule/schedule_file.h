#pragma once
// Schedules as data: every worker's action list written as JSON
// or CSV, read back, checked and replayed. The layout is described in
// runtime/schedule/README.md ("Schedule files"); JSON and CSV carry the same
// fields, so either converts to the other without loss.
#include <iosfwd>
#include <string>
#include <vector>

#include "runtime/schedule/schedule.h"

namespace pd {

struct ScheduleFile {
  ScheduleOptions options;                 // schedule, weights, microbatches, minibatches
  std::vector<int> stage_of_rank;          // as written; must agree with the plan
  std::vector<std::vector<Action>> lists;  // per rank, in execution order
};

// Every worker's whole list: memory minibatches x workers.
ScheduleFile export_schedule(const Schedule& schedule);

void write_schedule_json(std::ostream& os, const ScheduleFile& file);
void write_schedule_csv(std::ostream& os, const ScheduleFile& file);

// JSON when the text starts with '{', CSV otherwise. `source` names the file
// in messages. Throws UserError naming the line (CSV) or the action (JSON)
// that cannot be read.
ScheduleFile parse_schedule(const std::string& text, const std::string& source);
ScheduleFile read_schedule_file(const std::string& path);

// The Schedule (routing, limits, rounds) the file's options give for
// `plan`, after check_schedule accepts the file's lists. Throws UserError
// when the file does not fit the plan or the checker rejects it, naming the
// first bad action (rank, position, action).
Schedule checked_schedule(const Plan& plan, const ScheduleFile& file, const std::string& source);

// The short names files use, close to torch.distributed.pipelining's:
// F, B, SEND_F, RECV_F, SEND_B, RECV_B, ALLREDUCE, STEP.
const char* short_name(ActionKind k);
// Inverse of PackedAction::unpack.
PackedAction pack(const Action& a);

}  // namespace pd
