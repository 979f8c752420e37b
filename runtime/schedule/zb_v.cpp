// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024; PyTorch's
// ScheduleZBVZeroBubble): 2p stages on p workers in a V - worker w runs
// stage w and stage 2p - 1 - w - with the backward split into B and W, W's
// filling the bubbles, and no more activation memory than 1F1B: a worker
// holds at most 2p half-size stages' microbatches (1F1B's stage 0 holds p
// whole ones).
#include "runtime/schedule/list_order.h"
#include "runtime/schedule/schedule.h"
#include "runtime/schedule/v_shape.h"

namespace pd {
namespace {

class ZeroBubbleV final : public VShapedKind {
 public:
  const char* name() const override { return "zb-v"; }
  const char* help() const override {
    return "zero bubble V: 2 stages per worker in a V (w and 2p-1-w), B and W split, 1F1B's memory (unreplicated)";
  }
  std::vector<std::vector<OrderEntry>> worker_orders(const Schedule& s) const override {
    const int cap = 2 * s.workers();
    return list_order(s, {.split_backward = true, .cap = [cap](int) { return cap; }});
  }
};

}  // namespace

const ScheduleKind& zero_bubble_v_kind() {
  static const ZeroBubbleV k;
  return k;
}

}  // namespace pd
