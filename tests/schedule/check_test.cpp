// The checks must catch broken lists, not only pass good ones.
#include <gtest/gtest.h>

#include <algorithm>

#include "core/error.h"
#include "runtime/schedule/check.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

using testing::make_plan;

ScheduleOptions rr(int64_t minibatches, WeightPolicy policy = WeightPolicy::Stash) {
  return testing::schedule_options(parse_schedule_kind("1f1b-rr"), minibatches, 1, policy);
}

bool mentions(const std::vector<std::string>& v, const std::string& what) {
  return std::any_of(v.begin(), v.end(), [&](const std::string& m) { return m.find(what) != std::string::npos; });
}

size_t find(const std::vector<Action>& list, ActionKind kind, int64_t minibatch) {
  for (size_t i = 0; i < list.size(); ++i)
    if (list[i].kind == kind && list[i].minibatch == minibatch) return i;
  return list.size();
}

TEST(ScheduleCheck, MissingReceiveIsReported) {
  Schedule s(make_plan({1, 1, 1}), rr(4));
  auto lists = build_schedule(make_plan({1, 1, 1}), rr(4));
  lists[1].erase(lists[1].begin() + find(lists[1], ActionKind::RecvActivation, 2));
  auto v = check_schedule(s, lists);
  EXPECT_TRUE(mentions(v, "never received")) << (v.empty() ? "" : v.front());
  EXPECT_TRUE(mentions(v, "before its activation"));
}

// A message to itself is right only at a V's turn, where the neighbouring
// stage is the rank's own other chunk: here rank 1 runs no stage 0.
TEST(ScheduleCheck, WaitingOnItselfIsReported) {
  Schedule s(make_plan({1, 1}), rr(2));
  auto lists = build_schedule(make_plan({1, 1}), rr(2));
  lists[1][find(lists[1], ActionKind::RecvActivation, 0)].peer = 1;
  EXPECT_TRUE(mentions(check_schedule(s, lists), "peer rank 1 does not run stage 0"));
}

TEST(ScheduleCheck, CyclicWaitIsADeadlock) {
  // Stage 0 holds back the activations of m=0 and m=1 until it has run
  // B(0), whose gradient needs stage 1 to have run F(0): a cycle, though
  // every message still has its receive, in order.
  Plan p = make_plan({1, 1});
  Schedule s(p, rr(2));
  auto lists = build_schedule(p, rr(2));
  auto& a0 = lists[0];
  std::vector<Action> sends;
  for (int64_t m : {0, 1}) {
    size_t i = find(a0, ActionKind::SendActivation, m);
    sends.push_back(a0[i]);
    a0.erase(a0.begin() + i);
  }
  a0.insert(a0.begin() + find(a0, ActionKind::Backward, 0) + 1, sends.begin(), sends.end());
  auto v = check_schedule(s, lists);
  EXPECT_TRUE(mentions(v, "deadlock")) << (v.empty() ? "no violation" : v.front());
}

TEST(ScheduleCheck, MessagesReceivedOutOfOrderAreReported) {
  Plan p = make_plan({1, 1});
  Schedule s(p, rr(2));
  auto lists = build_schedule(p, rr(2));
  auto& a1 = lists[1];
  size_t recv1 = find(a1, ActionKind::RecvActivation, 1);
  Action early = a1[recv1];
  a1.erase(a1.begin() + recv1);
  a1.insert(a1.begin(), early);
  EXPECT_TRUE(mentions(check_schedule(s, lists), "is sent with tag 0 but received as tag 2"));
}

TEST(ScheduleCheck, TooManyInFlightIsReported) {
  Plan p = make_plan({1, 1, 1});
  Schedule s(p, rr(6));
  auto lists = build_schedule(p, rr(6));
  // The last stage (limit 1) runs F1 before B0.
  auto& l = lists[2];
  size_t b0 = find(l, ActionKind::Backward, 0);
  size_t r1 = find(l, ActionKind::RecvActivation, 1);
  std::vector<Action> f1(l.begin() + r1, l.begin() + r1 + 2);  // recv-act, F
  l.erase(l.begin() + r1, l.begin() + r1 + 2);
  l.insert(l.begin() + b0 - 1, f1.begin(), f1.end());
  EXPECT_TRUE(mentions(check_schedule(s, lists), "more than the limit 1"));
}

TEST(ScheduleCheck, WrongVersionsAreReported) {
  Plan p = make_plan({1, 1, 1});
  for (auto policy : {WeightPolicy::Stash, WeightPolicy::Vertical}) {
    Schedule s(p, rr(6, policy));
    auto lists = build_schedule(p, rr(6, policy));
    lists[0][find(lists[0], ActionKind::Backward, 4)].weight_version += 1;
    EXPECT_FALSE(check_schedule(s, lists).empty()) << to_string(policy);
    lists = build_schedule(p, rr(6, policy));
    lists[1][find(lists[1], ActionKind::Forward, 5)].weight_version -= 1;
    EXPECT_FALSE(check_schedule(s, lists).empty()) << to_string(policy);
  }
}

TEST(ScheduleCheck, RequireValidThrowsWithTheViolations) {
  Plan p = make_plan({2, 1});
  Schedule s(p, rr(4));
  auto lists = build_schedule(p, rr(4));
  EXPECT_NO_THROW(require_valid_schedule(s, lists));
  lists[0].pop_back();  // drop the last optimizer step
  EXPECT_THROW(require_valid_schedule(s, lists), RuntimeFailure);
}

}  // namespace
}  // namespace pd
