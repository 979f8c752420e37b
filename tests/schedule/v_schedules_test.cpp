// The V-shaped schedules: 2p stages on p workers, stage w and 2p - 1 - w on
// worker w; every generated list passes the checker, a worker holds no more
// activations than 1F1B's stage 0, and on uniform stages with F = B = W the
// bubble is below zb-h1's.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "runtime/schedule/check.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

using testing::make_plan;

// The V schedules these tests walk, and the most chunk-microbatches each
// may hold on a worker (half a whole stage's each): 2p for 1F1B's memory.
struct VCase {
  const char* name;
  int64_t (*most_held)(int workers);
};
const std::vector<VCase> kVSchedules = {{"zb-v", [](int p) { return int64_t{2} * p; }},
                                        {"dualpipev", [](int p) { return int64_t{2} * p + 1; }}};

ScheduleOptions v_options(const char* name, int microbatches, int64_t batches = 2) {
  return testing::schedule_options(parse_schedule_kind(name), batches, microbatches);
}

Plan uniform(int stages, double scale) {
  return make_plan(std::vector<int>(static_cast<size_t>(stages), 1), 1.0 * scale, 2.0 * scale);
}

double mean_bubble(const SimulationReport& rep) {
  double sum = 0;
  for (const auto& w : rep.workers) sum += w.bubble_fraction;
  return sum / static_cast<double>(rep.workers.size());
}

TEST(VSchedules, PlaceStageWAndTwoPMinusOneMinusWOnWorkerW) {
  for (const VCase& c : kVSchedules) {
    const Schedule s(uniform(8, 0.5), v_options(c.name, 8));
    ASSERT_EQ(s.workers(), 4) << c.name;
    for (int w = 0; w < 4; ++w) {
      EXPECT_EQ(s.stage_of(w, 0), w) << c.name;
      EXPECT_EQ(s.stage_of(w, 1), 7 - w) << c.name;
      EXPECT_EQ(s.place(7 - w).worker, w) << c.name;
    }
  }
}

TEST(VSchedules, GeneratedListsPassTheCheckerAndHoldNoMoreThanOneFOneB) {
  for (const VCase& c : kVSchedules)
    for (int p : {2, 3, 4, 8})
      for (int M : {1, 2, 3, 4, 7, 8, 16, 24}) {
        ScheduleOptions o = v_options(c.name, M, 3);
        std::unique_ptr<Schedule> s;
        try {
          s = std::make_unique<Schedule>(uniform(2 * p, 0.5), o);
        } catch (const UserError&) {
          continue;  // a microbatch count the schedule refuses (it says why)
        }
        const auto v = check_schedule(*s);
        EXPECT_TRUE(v.empty()) << c.name << " p=" << p << " M=" << M << ": " << v.front();
        for (int w = 0; w < p; ++w) EXPECT_LE(s->held_limit(w), c.most_held(p)) << c.name << " p=" << p << " M=" << M;
      }
}

TEST(VSchedules, BubbleBelowZeroBubbleH1sOnUniformStages) {
  for (const VCase& c : kVSchedules)
    for (int M : {8, 16}) {  // (dualpipev needs M >= 2p = 8)
      SimulationOptions zb, v;
      zb.schedule = testing::schedule_options(parse_schedule_kind("zb-h1"), 8, M);
      v.schedule = v_options(c.name, M, 8);
      const double h1 = mean_bubble(simulate(uniform(4, 1.0), zb));
      const double ours = mean_bubble(simulate(uniform(8, 0.5), v));
      EXPECT_LT(ours, h1) << c.name << " M=" << M;
      std::printf("%s M=%d: bubble %.3f (zb-h1 %.3f)\n", c.name, M, ours, h1);
    }
}

// The paper's ZB-V: with F = B = W, every worker is busy for the whole of
// the steady state (batches tile: worker w starts and ends w steps after
// worker 0), at 1F1B's activation memory (2p chunk-microbatches).
TEST(VSchedules, ZeroBubbleVHasNoSteadyStateBubbleAtOneFOneBsMemory) {
  for (int p : {2, 3, 4, 8})
    for (int M : {2 * p - 1, 2 * p, 16, 24}) {
      SimulationOptions o;
      o.schedule = v_options("zb-v", M, 8);
      const SimulationReport rep = simulate(uniform(2 * p, 0.5), o);
      for (const auto& w : rep.workers) {
        EXPECT_NEAR(w.bubble_fraction, 0.0, 1e-9) << "p=" << p << " M=" << M << " worker " << w.rank;
        EXPECT_EQ(w.peak_held, 2 * p) << "p=" << p << " M=" << M << " worker " << w.rank;
      }
    }
}

// DeepSeek's DualPipeV order with F = B = W = 1 step: worker 0 starts a
// batch first and ends it last (its stage 0 runs the batch's last B), so
// batches do not tile and every worker idles p - 1 steps a batch, at
// 2p + 1 chunk-microbatches held (DualPipe's PP + 1 with PP = 2p chunks).
TEST(VSchedules, DualPipeVIdlesPMinusOneStepsPerBatch) {
  for (int p : {2, 3, 4, 8})
    for (int M : {2 * p, 16, 24}) {
      SimulationOptions o;
      o.schedule = v_options("dualpipev", M, 8);
      const SimulationReport rep = simulate(uniform(2 * p, 0.5), o);
      const double step = 0.5 / M, compute = 6 * M * step;
      EXPECT_NEAR(rep.time_per_minibatch_s, compute + (p - 1) * step, 1e-9) << "p=" << p << " M=" << M;
      for (const auto& w : rep.workers) EXPECT_EQ(w.peak_held, 2 * p + 1) << "p=" << p << " M=" << M;
    }
}

}  // namespace
}  // namespace pd
