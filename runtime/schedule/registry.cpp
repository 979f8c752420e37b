// The registry: one row per schedule, in the order help and messages list
// them. A schedule's file defines its kind and the accessor named here.
#include "runtime/schedule/schedule_kind.h"

namespace pd {

const ScheduleKind& one_f_one_b_rr_kind();  // classic_kinds.cpp
const ScheduleKind& gpipe_kind();
const ScheduleKind& one_f_one_b_flush_kind();
const ScheduleKind& zero_bubble_h1_kind();
const ScheduleKind& interleaved_kind();
const ScheduleKind& two_bw_kind();
const ScheduleKind& zero_bubble_h2_kind();  // zb_h2.cpp
const ScheduleKind& zero_bubble_v_kind();  // zb_v.cpp
const ScheduleKind& dual_pipe_v_kind();    // dualpipe_v.cpp

const std::vector<const ScheduleKind*>& schedule_kinds() {
  static const std::vector<const ScheduleKind*> all{
      &one_f_one_b_rr_kind(),   // the default: PipeDream's
      &gpipe_kind(),
      &one_f_one_b_flush_kind(),
      &zero_bubble_h1_kind(),
      &interleaved_kind(),
      &two_bw_kind(),
      &zero_bubble_h2_kind(),
      &zero_bubble_v_kind(),
      &dual_pipe_v_kind(),
  };
  return all;
}

}  // namespace pd
