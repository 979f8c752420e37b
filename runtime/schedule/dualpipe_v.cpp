// DualPipeV (DeepSeek-V3's DualPipe cut in half, deepseek-ai/DualPipe
// dualpipev.py): 2p stages on p workers in a V, as zb-v, in dualpipev.py's
// eight steps per worker - nF0, nF0F1, nB1W1F1 (zero bubble), the main
// nF0B1F1B0 loop, nB1F1B0, nB1B0 (W's queued from its middle on), nWB0,
// nW - action for action. Its F&B pairs of opposite chunks are those
// DualPipe overlaps (one kernel stream hiding the other's communication);
// here each pair runs F then B, as dualpipev.py does without
// overlapped_forward_backward, and each half starts when its own input is
// there (DualPipe waits for both). A worker holds at most 2p + 1
// chunk-microbatches (DualPipe's PP + 1 with PP = 2p chunks: p + 1/2
// stages' worth). Needs M >= 2p.
#include "core/error.h"
#include "runtime/schedule/schedule.h"
#include "runtime/schedule/v_shape.h"

namespace pd {
namespace {

class DualPipeV final : public VShapedKind {
 public:
  const char* name() const override { return "dualpipev"; }
  const char* help() const override {
    return "DeepSeek's DualPipeV: 2 stages per worker in a V, DualPipe's order, M >= 2 x workers (unreplicated)";
  }
  void check(const Plan& plan, const ScheduleOptions& o) const override {
    const int workers = static_cast<int>(plan.stages.size()) / 2;
    if (o.microbatches < 2 * workers)
      throw UserError(cat("dualpipev needs at least 2 x workers microbatches per batch: --microbatches ",
                          o.microbatches, " < 2 x ", workers));
  }
  std::vector<std::vector<OrderEntry>> worker_orders(const Schedule& s) const override {
    std::vector<std::vector<OrderEntry>> all;
    for (int r = 0; r < s.workers(); ++r) all.push_back(rank_order(r, s.workers(), s.options().microbatches));
    return all;
  }

 private:
  // dualpipev.py's steps 1-8 for `rank`: F(c), B(c) with W at once or
  // queued (zero bubble), W the oldest queued.
  static std::vector<OrderEntry> rank_order(int rank, int p, int M) {
    std::vector<OrderEntry> o;
    int f[2] = {0, 0}, b[2] = {0, 0};
    std::vector<std::pair<int, int>> queued;  // (chunk, microbatch) awaiting W, oldest first
    size_t head = 0;
    auto F = [&](int c) { o.push_back({ActionKind::Forward, f[c]++, c}); };
    auto B = [&](int c, bool zero_bubble) {
      const int j = b[c]++;
      o.push_back({ActionKind::Backward, j, c});
      if (zero_bubble) queued.emplace_back(c, j);
      else o.push_back({ActionKind::BackwardWeight, j, c});
    };
    auto W = [&] {
      const auto [c, j] = queued.at(head++);
      o.push_back({ActionKind::BackwardWeight, j, c});
    };
    for (int i = 0; i < (p - rank - 1) * 2; ++i) F(0);           // 1: nF0
    for (int i = 0; i < rank + 1; ++i) F(0), F(1);              // 2: nF0F1
    for (int i = 0; i < p - rank - 1; ++i) B(1, true), W(), F(1);  // 3: nB1W1F1
    for (int i = 0; i < M - 2 * p + rank + 1; ++i) {             // 4: nF0B1F1B0
      F(0), B(1, false);
      F(1), B(0, false);
    }
    for (int i = 0; i < p - rank - 1; ++i) B(1, false), F(1), B(0, false);  // 5: nB1F1B0
    bool zero_bubble = false;
    const int step6 = rank + 1;
    for (int i = 0; i < step6; ++i) {  // 6: nB1W1B0W0
      if (i == step6 / 2 && rank % 2 == 1) zero_bubble = true;
      B(1, zero_bubble);
      if (i == step6 / 2 && rank % 2 == 0) zero_bubble = true;
      B(0, zero_bubble);
    }
    for (int i = 0; i < p - rank - 1; ++i) W(), B(0, true);  // 7: nWB0
    while (head < queued.size()) W();                        // 8: nW
    PD_CHECK(f[0] == M && f[1] == M && b[0] == M && b[1] == M, "dualpipev order of rank ", rank, " covers ", f[0],
             "/", f[1], " forwards and ", b[0], "/", b[1], " backwards of ", M);
    return o;
  }
};

}  // namespace

const ScheduleKind& dual_pipe_v_kind() {
  static const DualPipeV k;
  return k;
}

}  // namespace pd
