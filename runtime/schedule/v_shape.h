#pragma once
// The V placement that zb-v and dualpipev share: 2p stages on p workers,
// worker w running stage w (chunk 0) and stage 2p - 1 - w (chunk 1), so the
// first and last stages sit together; the backward split into B and W;
// unreplicated stages only. Each schedule adds its name, help and order.
#include "runtime/schedule/schedule_kind.h"

namespace pd {

class VShapedKind : public ScheduleKind {
 public:
  bool splits_backward() const override { return true; }
  bool unreplicated_only() const override { return true; }
  int chunks(int) const override { return 2; }
  int stage_at(int worker, int chunk, int workers) const override {
    return chunk == 0 ? worker : 2 * workers - 1 - worker;
  }
  int chunk_of(int stage, int workers) const override { return stage < workers ? 0 : 1; }
};

}  // namespace pd
