#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <set>
#include <tuple>
#include <vector>

#include "runtime/simulator/event_queue.h"

namespace pd {
namespace {

// The order replays depend on: earliest time first, and of equal times the
// event pushed last. The reference is a plain ordered set.
class ReferenceQueue {
 public:
  void push(double t, int rank) { set_.insert({t, -seq_++, rank}); }
  std::pair<double, int> pop() {
    auto [t, neg_seq, rank] = *set_.begin();
    set_.erase(set_.begin());
    return {t, rank};
  }
  bool empty() const { return set_.empty(); }

 private:
  std::set<std::tuple<double, int64_t, int>> set_;
  int64_t seq_ = 0;
};

// A replay-like workload: each popped event pushes up to two more, at the
// same time, after one of a few fixed delays (delay lines) or at a later
// arbitrary time (coarse, so that times often coincide).
void check_against_reference(size_t lines, uint32_t seed) {
  std::mt19937 rng(seed);
  const std::vector<double> delays = {0.25, 0.5, 0.75, 0.5 + 0.25, 1.0 / 3};
  EventQueue q(lines);
  ReferenceQueue ref;
  for (int r = 0; r < 50; ++r) {
    q.push({0.0, r});
    ref.push(0.0, r);
  }
  int pops = 0;
  while (!ref.empty()) {
    ASSERT_FALSE(q.empty());
    const int peeked = q.peek_rank();
    auto [t, rank] = ref.pop();
    EventQueue::Event e = q.pop();
    ASSERT_EQ(e.time, t) << "pop " << pops;
    ASSERT_EQ(e.rank, rank) << "pop " << pops;
    EXPECT_GE(peeked, 0);
    ++pops;
    if (pops > 20000) continue;  // drain
    const int children = static_cast<int>(rng() % 3);
    for (int c = 0; c < children; ++c) {
      const int next_rank = static_cast<int>(rng() % 1000);
      const uint32_t how = rng() % 4;
      if (how == 0) {
        q.push({t, next_rank});
        ref.push(t, next_rank);
      } else if (how == 1 || lines == 0) {
        double later = t + double(rng() % 8) * 0.125;
        q.push({later, next_rank});
        ref.push(later, next_rank);
      } else {
        size_t line = rng() % lines;
        double later = t + delays[line % delays.size()];
        q.push_delayed({later, next_rank}, line);
        ref.push(later, next_rank);
      }
    }
  }
  EXPECT_TRUE(q.empty());
  EXPECT_EQ(q.peek_rank(), -1);
}

TEST(EventQueue, PopsEarliestFirstAndLastPushedFirstAmongEqualTimes) {
  for (size_t lines : {0, 1, 3, 5})
    for (uint32_t seed : {1u, 2u, 3u}) check_against_reference(lines, seed);
}

TEST(EventQueue, ZeroDelayGoesBeforeEarlierEventsOfTheSameTime) {
  EventQueue q(1);
  q.push({0.0, 1});
  q.push({0.0, 2});
  EXPECT_EQ(q.pop().rank, 2);
  q.push_delayed({0.0, 3}, 0);  // due now: pops before rank 1, pushed earlier
  EXPECT_EQ(q.pop().rank, 3);
  EXPECT_EQ(q.pop().rank, 1);
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace pd
