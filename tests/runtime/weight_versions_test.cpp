// WeightVersionStore keeps a version exactly as long as someone needs it.
#include <gtest/gtest.h>

#include <limits>

#include "runtime/weight_versions.h"
#include "pipeline_fixture.h"

namespace pd {
namespace {

constexpr int64_t kNoFutureNeed = std::numeric_limits<int64_t>::max();

TEST(WeightVersionStore, PinnedVersionSurvivesUpdatesUntilUnpinned) {
  const Model m = testing::small_mlp();
  ParameterStore live = ParameterStore::create(m, 0, 1, 1);
  WeightVersionStore store(live, 0);
  store.pin(0);
  const float before = live.all_params()[0].f32()[0];
  store.before_update(kNoFutureNeed);
  live.all_params()[0].f32()[0] += 1.0f;  // the optimizer step, in place
  store.updated(1, kNoFutureNeed);
  EXPECT_EQ(store.versions_held(), 2);
  EXPECT_EQ(store.get(0).all_params()[0].f32()[0], before);
  EXPECT_EQ(store.get(1).all_params()[0].f32()[0], before + 1.0f);
  store.unpin(0);
  store.release(kNoFutureNeed);
  EXPECT_EQ(store.versions_held(), 1);
  EXPECT_FALSE(store.has(0));
  EXPECT_EQ(store.peak_versions(), 2);
}

TEST(WeightVersionStore, UnneededVersionIsUpdatedInPlace) {
  const Model m = testing::small_mlp();
  ParameterStore live = ParameterStore::create(m, 0, 1, 1);
  WeightVersionStore store(live, 0);
  for (int64_t v = 0; v < 5; ++v) {
    store.before_update(kNoFutureNeed);
    store.updated(v + 1, kNoFutureNeed);
  }
  EXPECT_EQ(store.peak_versions(), 1);
  EXPECT_EQ(store.newest_version(), 5);
}

TEST(WeightVersionStore, VersionsFutureForwardsNeedAreKept) {
  // Vertical sync: the next forward will ask for version 1.
  const Model m = testing::small_mlp();
  ParameterStore live = ParameterStore::create(m, 0, 1, 1);
  WeightVersionStore store(live, 0);
  store.before_update(0);
  store.updated(1, 0);
  store.before_update(1);
  store.updated(2, 1);
  EXPECT_FALSE(store.has(0));
  EXPECT_TRUE(store.has(1));
  EXPECT_TRUE(store.has(2));
  EXPECT_THROW(store.get(0), std::logic_error);
}

TEST(WeightVersionStore, StashCopiesIntoFreedBuffersHoldTheirOwnValues) {
  // 1F1B on a first stage: every update stashes the newest version while an
  // older one is released. The released version's buffers are reused for the
  // next stash; the stash must still be an exact, independent copy.
  const Model m = testing::small_mlp();
  ParameterStore live = ParameterStore::create(m, 0, 1, 1);
  WeightVersionStore store(live, 0);
  const size_t one_version = live.param_bytes();
  store.pin(0);
  for (int64_t v = 0; v < 4; ++v) {
    const float at_v = live.all_params()[0].f32()[0];
    store.before_update(kNoFutureNeed);
    live.all_params()[0].f32()[0] += 1.0f;  // the optimizer step, in place
    store.updated(v + 1, kNoFutureNeed);
    store.pin(v + 1);                        // the next forward
    EXPECT_EQ(store.get(v).all_params()[0].f32()[0], at_v) << "version " << v;
    EXPECT_NE(store.get(v).all_params()[0].raw(), live.all_params()[0].raw());
    store.unpin(v);                          // its backward
    store.release(kNoFutureNeed);
    EXPECT_FALSE(store.has(v));
    EXPECT_EQ(store.versions_held(), 1);
    EXPECT_LE(store.bytes_held(), 2 * one_version);  // newest + at most one spare
  }
  EXPECT_EQ(store.peak_versions(), 2);
}

}  // namespace
}  // namespace pd
