// The core hand-off (runtime/comm/core_handoff.h): which queued thread a
// rank about to sleep moves onto its core, and that the move happens.
#include "runtime/comm/core_handoff.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "../user_error_of.h"

namespace pd {
namespace {

using testing_support::error_of;

TEST(CoreHandoff, MovesAThreadQueuedBehindABusyCore) {
  EXPECT_EQ(choose_thread_to_move(1, {{11, 0, true}, {12, 0, true}}), 11);
}

TEST(CoreHandoff, MovesNothingWhenAPeerIsAlreadyOnTheCallersCore) {
  // 13 takes core 1 when the caller sleeps.
  EXPECT_EQ(choose_thread_to_move(1, {{11, 0, true}, {12, 0, true}, {13, 1, true}}), -1);
}

TEST(CoreHandoff, MovesNothingWhenNoThreadWaitsBehindAnother) {
  EXPECT_EQ(choose_thread_to_move(1, {}), -1);
  EXPECT_EQ(choose_thread_to_move(1, {{11, 0, true}}), -1);
  EXPECT_EQ(choose_thread_to_move(1, {{11, 0, true}, {12, 2, true}}), -1);
}

TEST(CoreHandoff, TakesFromTheBusiestCore) {
  EXPECT_EQ(choose_thread_to_move(1, {{11, 0, true}, {12, 0, true}, {13, 2, true}, {14, 2, true}, {15, 2, true}}),
            13);
}

TEST(CoreHandoff, NeverMovesAThreadWhoseMaskLeavesTheCoreOut) {
  EXPECT_EQ(choose_thread_to_move(1, {{11, 0, false}, {12, 0, false}}), -1);
  EXPECT_EQ(choose_thread_to_move(1, {{11, 0, false}, {12, 0, true}}), 12);
  // Core 2 is busier, but none of its threads may come.
  EXPECT_EQ(choose_thread_to_move(1, {{11, 0, true}, {12, 0, true}, {13, 2, false}, {14, 2, false}, {15, 2, false}}),
            11);
}

struct EnvVar {
  explicit EnvVar(const char* value) {
    if (value)
      setenv("PIPEDREAM_CORE_HANDOFF", value, 1);
    else
      unsetenv("PIPEDREAM_CORE_HANDOFF");
  }
  ~EnvVar() { unsetenv("PIPEDREAM_CORE_HANDOFF"); }
};

TEST(CoreHandoff, TheSwitchIsAutoOnOrOffAndNothingElse) {
  {
    EnvVar v(nullptr);
    EXPECT_EQ(core_handoff_mode_from_env(), CoreHandoffMode::kAuto);
  }
  {
    EnvVar v("off");
    EXPECT_EQ(core_handoff_mode_from_env(), CoreHandoffMode::kOff);
  }
  {
    EnvVar v("ON");
    EXPECT_EQ(core_handoff_mode_from_env(), CoreHandoffMode::kOn);
  }
  EnvVar v("yes");
  EXPECT_NE(error_of([] { core_handoff_mode_from_env(); })
                .find("PIPEDREAM_CORE_HANDOFF must be auto, on or off, got 'yes'"),
            std::string::npos);
}

TEST(CoreHandoff, AutoIsOnWhenTheHostsRanksOutnumberItsCores) {
  cpu_set_t mine;
  ASSERT_EQ(sched_getaffinity(0, sizeof mine, &mine), 0);
  const int cores = CPU_COUNT(&mine);
  EXPECT_FALSE(core_handoff_enabled(CoreHandoffMode::kAuto, cores));
  EXPECT_TRUE(core_handoff_enabled(CoreHandoffMode::kAuto, cores + 1));
  EXPECT_TRUE(core_handoff_enabled(CoreHandoffMode::kOn, 1));
  EXPECT_FALSE(core_handoff_enabled(CoreHandoffMode::kOff, cores + 1));
}

int cpu_of(int tid) {
  char path[48], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", tid);
  FILE* f = fopen(path, "r");
  if (!f) return -1;
  const size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  const char* p = strrchr(buf, ')') + 2;
  for (int field = 3; field < 39; ++p)
    if (*p == ' ') ++field;
  return atoi(p);
}

void pin(int tid, const std::vector<int>& cpus) {
  cpu_set_t s;
  CPU_ZERO(&s);
  for (int c : cpus) CPU_SET(c, &s);
  ASSERT_EQ(sched_setaffinity(tid, sizeof s, &s), 0);
}

// Two spinning threads share core A while the caller runs on core B: the
// caller's offer moves one of them to B at once, with its mask given back.
TEST(CoreHandoff, OfferingACoreMovesAQueuedThreadOntoIt) {
  cpu_set_t original;
  ASSERT_EQ(sched_getaffinity(0, sizeof original, &original), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &original)) cpus.push_back(c);
  if (cpus.size() < 2) GTEST_SKIP() << "needs two cores";
  const int a = cpus[0], b = cpus[1];
  pin(0, {b});
  std::atomic<bool> stop{false};
  std::atomic<int> tids[2] = {0, 0};
  std::vector<std::thread> spinners;
  for (auto& tid : tids)
    spinners.emplace_back([&stop, &tid] {
      tid = static_cast<int>(gettid());
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  for (auto& tid : tids)
    while (tid.load() == 0) std::this_thread::yield();
  const std::vector<int> peers = {tids[0].load(), tids[1].load()};
  int moved = -1;
  for (int attempt = 0; attempt < 5 && moved < 0; ++attempt) {
    for (int t : peers) pin(t, {a});
    for (int t : peers) pin(t, {a, b});  // widened: the kernel leaves them on A while B is busy
    if (cpu_of(peers[0]) != a || cpu_of(peers[1]) != a) continue;
    CoreHandoff handoff(true);
    moved = handoff.offer_my_core(peers);
    ASSERT_TRUE(moved == peers[0] || moved == peers[1]) << "moved " << moved;
    EXPECT_EQ(cpu_of(moved), b);
    cpu_set_t mask;
    ASSERT_EQ(sched_getaffinity(moved, sizeof mask, &mask), 0);
    EXPECT_TRUE(CPU_ISSET(a, &mask) && CPU_ISSET(b, &mask)) << "its mask was given back";
    EXPECT_EQ(handoff.offer_my_core(peers), -1) << "a peer is on the caller's core now";
  }
  stop = true;
  for (auto& t : spinners) t.join();
  sched_setaffinity(0, sizeof original, &original);
  EXPECT_GE(moved, 0) << "the spinners never both sat on core " << a;
}

TEST(CoreHandoff, AnOfferWhileOffMovesNothing) {
  CoreHandoff handoff(false);
  EXPECT_EQ(handoff.offer_my_core({static_cast<int>(gettid())}), -1);
}

}  // namespace
}  // namespace pd
