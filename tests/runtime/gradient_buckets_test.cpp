// The bucket plan the executor's gradient all-reduce runs
// (runtime/comm/gradient_buckets.h): whole layers in backward order, a
// bucket closing once it holds at least bucket_bytes.
#include <gtest/gtest.h>

#include "runtime/comm/gradient_buckets.h"

namespace pd {
namespace {

std::vector<std::vector<size_t>> layer_positions(const std::vector<GradientBucket>& plan) {
  std::vector<std::vector<size_t>> out;
  for (const GradientBucket& b : plan) out.push_back(b.layers);
  return out;
}

TEST(GradientBucketPlan, BucketClosesAtTheLayerThatReachesTheSize) {
  // Layers (backward order) of 3, 1, 4, 4 and 2 bytes, buckets of 4: the
  // second layer brings the first bucket to exactly 4, which closes it.
  auto plan = plan_gradient_buckets({{3}, {1}, {4}, {2, 2}, {2}}, 4);
  EXPECT_EQ(layer_positions(plan), (std::vector<std::vector<size_t>>{{0, 1}, {2}, {3}, {4}}));
  ASSERT_EQ(plan.size(), 4u);
  EXPECT_EQ(plan[0].bytes, 4u);
  EXPECT_EQ(plan[1].bytes, 4u);
  EXPECT_EQ(plan[2].bytes, 4u);
  EXPECT_EQ(plan[3].bytes, 2u);  // the last bucket takes what is left
}

TEST(GradientBucketPlan, LayerLargerThanABucketIsNeverSplit) {
  auto plan = plan_gradient_buckets({{1}, {100, 7}, {1}}, 10);
  EXPECT_EQ(layer_positions(plan), (std::vector<std::vector<size_t>>{{0, 1}, {2}}));
  EXPECT_EQ(plan[0].bytes, 108u);
}

TEST(GradientBucketPlan, LayersWithoutParametersBelongToNoBucket) {
  auto plan = plan_gradient_buckets({{}, {2}, {}, {2}, {}}, 4);
  EXPECT_EQ(layer_positions(plan), (std::vector<std::vector<size_t>>{{1, 3}}));
  EXPECT_TRUE(plan_gradient_buckets({{}, {}}, 4).empty());
}

TEST(GradientBucketPlan, EverythingFitsInOneBucketBelowTheSize) {
  auto plan = plan_gradient_buckets({{1}, {1}, {1}}, GradientBuckets::kDefaultBucketBytes);
  EXPECT_EQ(layer_positions(plan), (std::vector<std::vector<size_t>>{{0, 1, 2}}));
}

TEST(GradientBucketPlan, DefaultsAreTheExecutorsFourMiBSum) {
  EXPECT_EQ(GradientBuckets::kDefaultBucketBytes, size_t{4} << 20);
}

}  // namespace
}  // namespace pd
