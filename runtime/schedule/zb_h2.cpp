// ZB-H2 (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024): one
// stage per worker, the backward split into B and W, and up to twice
// 1F1B's activation memory - a worker holds up to 2S microbatches between
// F and W (1F1B's stage 0: S) - so that extra warm-up forwards and late W's
// keep every worker busy from its first action to its last; a batch's fill
// on the later stages then overlaps the previous batch's drain on the
// earlier ones, and the steady state has no bubble.
#include "runtime/schedule/list_order.h"
#include "runtime/schedule/schedule.h"

namespace pd {
namespace {

class ZeroBubbleH2 final : public ScheduleKind {
 public:
  const char* name() const override { return "zb-h2"; }
  const char* help() const override {
    return "zero bubble H2: backward split into B and W, up to twice 1F1B's memory to fill the bubbles (unreplicated)";
  }
  bool splits_backward() const override { return true; }
  bool unreplicated_only() const override { return true; }
  std::vector<std::vector<OrderEntry>> worker_orders(const Schedule& s) const override {
    const int cap = 2 * s.stages();
    return list_order(s, {.split_backward = true, .cap = [cap](int) { return cap; }});
  }
};

}  // namespace

const ScheduleKind& zero_bubble_h2_kind() {
  static const ZeroBubbleH2 k;
  return k;
}

}  // namespace pd
