// WeightVersionStore keeps a version exactly as long as someone needs it.
#include <gtest/gtest.h>

#include <limits>

#include "runtime/weight_versions.h"
#include "pipeline_fixture.h"

namespace pd {
namespace {

constexpr int64_t kNoFutureNeed = std::numeric_limits<int64_t>::max();

// The optimizer step of these tests: the first weight goes up by one.
void add_one_to_first(std::span<const Tensor> from, std::span<Tensor> to) {
  for (size_t i = 0; i < to.size(); ++i)
    if (to[i].raw() != from[i].raw()) to[i].copy_from(from[i]);
  to[0].f32()[0] += 1.0f;
}

TEST(WeightVersionStore, PinnedVersionSurvivesUpdatesUntilUnpinned) {
  const Model m = testing::small_mlp();
  ParameterStore live = ParameterStore::create(m, 0, 1, 1);
  WeightVersionStore store(live, 0);
  store.pin(0);
  const float before = live.all_params()[0].f32()[0];
  store.update(1, kNoFutureNeed, add_one_to_first);
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
  const void* storage = live.all_params()[0].raw();
  for (int64_t v = 0; v < 5; ++v)
    store.update(v + 1, kNoFutureNeed, [&](std::span<const Tensor> from, std::span<Tensor> to) {
      EXPECT_EQ(from.data(), to.data());  // in place: no second buffer
      add_one_to_first(from, to);
    });
  EXPECT_EQ(store.peak_versions(), 1);
  EXPECT_EQ(live.all_params()[0].raw(), storage);
  EXPECT_EQ(store.newest_version(), 5);
}

TEST(WeightVersionStore, VersionsFutureForwardsNeedAreKept) {
  // Vertical sync: the next forward will ask for version 1.
  const Model m = testing::small_mlp();
  ParameterStore live = ParameterStore::create(m, 0, 1, 1);
  WeightVersionStore store(live, 0);
  store.update(1, 0, add_one_to_first);
  store.update(2, 1, add_one_to_first);
  EXPECT_FALSE(store.has(0));
  EXPECT_TRUE(store.has(1));
  EXPECT_TRUE(store.has(2));
  EXPECT_THROW(store.get(0), std::logic_error);
}

TEST(WeightVersionStore, StashedVersionsAndFreedBuffersHoldTheirOwnValues) {
  // 1F1B on a first stage: every update stashes the newest version while an
  // older one is released. The released version's buffers receive the next
  // update; each kept version must keep exactly its own values.
  const Model m = testing::small_mlp();
  ParameterStore live = ParameterStore::create(m, 0, 1, 1);
  WeightVersionStore store(live, 0);
  const size_t one_version = live.param_bytes();
  store.pin(0);
  for (int64_t v = 0; v < 4; ++v) {
    const float at_v = live.all_params()[0].f32()[0];
    store.update(v + 1, kNoFutureNeed, add_one_to_first);
    store.pin(v + 1);                        // the next forward
    EXPECT_EQ(live.all_params()[0].f32()[0], at_v + 1.0f);
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

TEST(WeightVersionStore, KeptVersionSharesTheLiveBuffers) {
  // BatchNorm running statistics are not versioned: every version reads the live ones.
  const Model m = resolve_model("resnet18", "", "width=0.125,image_size=8,classes=10");
  ParameterStore live = ParameterStore::create(m, 0, 1, 1);  // conv, batchnorm
  ASSERT_FALSE(live.all_buffers().empty());
  WeightVersionStore store(live, 0);
  store.pin(0);
  store.update(1, kNoFutureNeed, add_one_to_first);
  EXPECT_EQ(store.get(0).all_buffers()[0].raw(), live.all_buffers()[0].raw());
}

}  // namespace
}  // namespace pd
