#pragma once
// The pipeline timeline drawn the way papers draw it (GPipe, PipeDream,
// 1F1B): one row per worker, forward and backward boxes in distinct colours
// labelled with their minibatch, all-reduces as a strip under the compute of
// every replica, idle time as the row's grey background, a time axis and a
// legend. A plain SVG written here: no plotting dependency.
#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "runtime/simulator/simulator.h"

namespace pd {

struct TimelineSvgOptions {
  // Draw the time span of the first this many minibatches (flush
  // schedules: batches): from 0 to the end of the last of their
  // computations, with whatever else runs in it. 0: the whole trace.
  int64_t minibatches = 0;
  bool flush = false;  // label boxes with the microbatch index within its batch
  std::string title;   // drawn above the rows when not empty
  // Where stages run: with several per worker (interleaved-1f1b's
  // --virtual-stages, the V shapes) a row is a worker, named with its
  // stages, and boxes of chunk c > 0 are drawn in a darker shade.
  // Schedule::stages_by_worker(): each worker's stages; empty: one stage
  // per worker, as the plan's ranks say.
  std::vector<std::vector<int>> worker_stages;
};

// Elements carry classes a test (or a stylesheet) can find: each worker's
// background is a rect of class "row", each box a group of class "F", "B",
// "W" (zb-h1's weight gradient) or "allreduce" holding its rect and, where it fits, a text of class
// "label" with the minibatch (flush: microbatch) number.
void write_timeline_svg(std::ostream& os, const Plan& plan, const std::vector<TraceEvent>& events,
                        const TimelineSvgOptions& options);

}  // namespace pd
