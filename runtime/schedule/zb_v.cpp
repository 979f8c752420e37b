// ZB-V (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024; PyTorch's
// ScheduleZBVZeroBubble): 2p stages on p workers in a V - worker w runs
// stage w (chunk 0) and stage 2p - 1 - w (chunk 1) - with the backward
// split into B and W and the paper's hand-built order per worker:
//   warm-up  2(p - w) - 1 F0's, then w pairs F1 F0 (a worker then holds
//            2p - 1 chunk-microbatches), then p - w rounds F1 B1 W1;
//   steady   F0 B0 W0 F1 B1 W1 until every F has run;
//   drain    w pairs B0 B1 with their W's held back, p - w rounds B0 W0,
//            then the held W's, chunk 1's first.
// Every worker holds at most 2p chunk-microbatches (each half a stage's),
// 1F1B's stage-0 memory of p whole stages. With F = B = W each worker is
// busy from its first action of a batch to its last; worker w starts w
// steps after worker 0 and ends w steps after it too, so consecutive
// batches tile and the bubble left is the first batch's fill and the last
// one's drain.
#include <algorithm>

#include "core/error.h"
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
    std::vector<std::vector<OrderEntry>> all;
    for (int w = 0; w < s.workers(); ++w) all.push_back(worker_order(w, s.workers(), s.options().microbatches));
    return all;
  }

 private:
  // The V order needs 2p - 1 microbatches to fill; with fewer, it is built
  // for 2p - 1 and the actions of microbatches past M dropped on every
  // worker alike, which keeps each stage's sends and receives paired.
  static std::vector<OrderEntry> worker_order(int w, int p, int M) {
    const int n = std::max(M, 2 * p - 1);
    std::vector<OrderEntry> o;
    int f[2] = {0, 0}, b[2] = {0, 0}, wt[2] = {0, 0};
    auto F = [&](int c) { o.push_back({ActionKind::Forward, f[c]++, c}); };
    auto B = [&](int c) { o.push_back({ActionKind::Backward, b[c]++, c}); };
    auto W = [&](int c) { o.push_back({ActionKind::BackwardWeight, wt[c]++, c}); };
    for (int i = 0; i < 2 * (p - w) - 1; ++i) F(0);
    for (int i = 0; i < w; ++i) F(1), F(0);
    for (int i = 0; i < p - w; ++i) F(1), B(1), W(1);
    while (f[0] < n || f[1] < f[0]) {
      if (f[0] < n) F(0);
      B(0), W(0);
      F(1), B(1), W(1);
    }
    for (int i = 0; i < w; ++i) B(0), B(1);
    for (int i = 0; i < p - w; ++i) B(0), W(0);
    while (wt[1] < b[1]) W(1);
    while (wt[0] < b[0]) W(0);
    PD_CHECK(f[0] == n && f[1] == n && b[0] == n && b[1] == n && wt[0] == n && wt[1] == n, "zb-v order of worker ",
             w, " covers ", f[0], "/", f[1], " forwards of ", n);
    std::erase_if(o, [M](const OrderEntry& e) { return e.microbatch >= M; });
    return o;
  }
};

}  // namespace

const ScheduleKind& zero_bubble_v_kind() {
  static const ZeroBubbleV k;
  return k;
}

}  // namespace pd
