#pragma once
// Device time per DeviceOps entry, for finding where a training step's time
// goes inside its layers (`pipedream-bench core --op-times`). While timing
// is on, device_ops() hands out a copy of each backend's table whose kernel
// entries record the backend's events (event_record: CUDA events on the
// compute stream, wall-clock stamps on the CPU) around the call; entries
// called from inside another entry count in their caller only. The runtime
// entries (synchronize, events, pinned memory, uploads, settings and the
// fused_attention_supported query) are not timed.
//
// On the GPU an entry's time runs from its first event to its second, so it
// includes the gaps when the host launched more slowly than the GPU ran (a
// launch-bound step shows that as time spread over its small entries).
// Timing adds two events per call: measure the step's speed without it.
#include <cstdint>
#include <string>
#include <vector>

namespace pd {

struct OpTime {
  std::string op;  // the DeviceOps entry, e.g. "gemm", "round_bf16"
  int64_t calls = 0;
  double ms = 0;  // device time summed over the calls
};

// Starts timing (clears what an earlier timing left). Not reentrant: one
// timing at a time, in one process.
void start_op_timing();

// Stops timing, waits for the recorded events and returns the time per
// entry, largest first; entries never called are left out.
std::vector<OpTime> stop_op_timing();

bool op_timing_active();

}  // namespace pd
