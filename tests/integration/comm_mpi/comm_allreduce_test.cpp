// All-reduce of the MPI transport (run with 4 ranks): correctness, several
// groups in flight, and bitwise determinism whatever the arrival order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <thread>

#include "runtime/comm/gradient_buckets.h"
#include "tests/integration/comm_mpi/mpi_test_main.h"

namespace pd {
namespace {

using pd::testing::transport;

// What rank r contributes in trial `trial`: magnitudes spread over many
// decades so that a different order of additions gives different bits.
std::vector<float> contribution(int r, int trial, size_t n) {
  std::mt19937 gen(1000 * trial + r);
  std::uniform_real_distribution<float> mant(-1.f, 1.f);
  std::uniform_int_distribution<int> expo(-20, 20);
  std::vector<float> v(n);
  for (auto& x : v) x = std::ldexp(mant(gen), expo(gen));
  return v;
}

std::vector<float> expected(const std::vector<int>& ranks, int trial, size_t n, ReduceOp op) {
  std::vector<std::vector<float>> in;
  std::vector<const float*> ptrs;
  for (int r : ranks) in.push_back(contribution(r, trial, n));
  for (auto& v : in) ptrs.push_back(v.data());
  std::vector<float> out(n);
  reduce_in_rank_order(ptrs, out.data(), n, op);
  return out;
}

Tensor as_tensor(const std::vector<float>& v) {
  return Tensor::from_floats(v, {static_cast<int64_t>(v.size())});
}

bool bitwise_equal(const Tensor& t, const std::vector<float>& v) {
  return static_cast<size_t>(t.numel()) == v.size() && std::memcmp(t.f32(), v.data(), v.size() * 4) == 0;
}

TEST(CommAllReduce, SumAndAverageOverTheWorldAreBitwiseTheRankOrderReduction) {
  auto& tr = transport();
  auto world = tr.world_group();
  for (size_t n : {size_t{1}, size_t{3}, size_t{4}, size_t{1001}, size_t{300000}}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
      int trial = static_cast<int>(n) + (op == ReduceOp::Sum ? 0 : 7);
      Tensor x = as_tensor(contribution(tr.rank(), trial, n));
      tr.all_reduce(*world, {x}, op);
      EXPECT_TRUE(bitwise_equal(x, expected(world->ranks(), trial, n, op))) << "n=" << n;
    }
  }
}

TEST(CommAllReduce, AverageIsSumDividedByGroupSize) {
  auto& tr = transport();
  Tensor x = Tensor::full({5}, static_cast<float>(tr.rank() + 1));  // 1..4
  tr.all_reduce(*tr.world_group(), {x}, ReduceOp::Average);
  EXPECT_EQ(x.f32()[4], 2.5f);
}

TEST(CommAllReduce, SeveralGroupsInFlightAtOnce) {
  auto& tr = transport();
  const int me = tr.rank();
  // Pairs {0,1},{2,3}, cross pairs {0,2},{1,3}, and the world: each rank
  // starts all three of its all-reduces before waiting on any.
  auto pair = tr.make_group(me < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3});
  auto cross = tr.make_group(me % 2 == 0 ? std::vector<int>{0, 2} : std::vector<int>{1, 3});
  auto world = tr.world_group();
  const size_t n = 50000;
  Tensor a = as_tensor(contribution(me, 1, n));
  Tensor b = as_tensor(contribution(me, 2, n));
  Tensor c = as_tensor(contribution(me, 3, n));
  std::vector<Request> reqs = {tr.iall_reduce(*pair, {a}, ReduceOp::Sum),
                               tr.iall_reduce(*cross, {b}, ReduceOp::Average),
                               tr.iall_reduce(*world, {c}, ReduceOp::Sum)};
  // Wait in a rank-dependent order.
  for (int k = 0; k < 3; ++k) reqs[(k + me) % 3].wait();
  EXPECT_TRUE(bitwise_equal(a, expected(pair->ranks(), 1, n, ReduceOp::Sum)));
  EXPECT_TRUE(bitwise_equal(b, expected(cross->ranks(), 2, n, ReduceOp::Average)));
  EXPECT_TRUE(bitwise_equal(c, expected(world->ranks(), 3, n, ReduceOp::Sum)));
}

TEST(CommAllReduce, ResultDoesNotDependOnArrivalOrder) {
  auto& tr = transport();
  auto world = tr.world_group();
  const size_t n = 20000;
  // Each trial staggers the ranks differently so contributions arrive in a
  // different order; every result must equal the same rank-order sum.
  const auto want = expected(world->ranks(), 42, n, ReduceOp::Sum);
  for (int trial = 0; trial < 4; ++trial) {
    int delay_ms = ((tr.rank() + trial) % tr.world_size()) * 15;
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    Tensor x = as_tensor(contribution(tr.rank(), 42, n));
    tr.all_reduce(*world, {x}, ReduceOp::Sum);
    EXPECT_TRUE(bitwise_equal(x, want)) << "trial " << trial;
  }
}

TEST(CommAllReduce, BucketOfSeveralTensorsAndManyInFlight) {
  auto& tr = transport();
  auto world = tr.world_group();
  // 12 buckets of 3 tensors each (odd sizes), all started before any wait,
  // as the executor does while backward runs.
  std::vector<std::vector<Tensor>> buckets;
  std::vector<Request> reqs;
  for (int b = 0; b < 12; ++b) {
    std::vector<Tensor> bucket;
    for (int k = 0; k < 3; ++k)
      bucket.push_back(as_tensor(contribution(tr.rank(), 100 + 3 * b + k, 37 * (b + 1) + k)));
    buckets.push_back(bucket);
    reqs.push_back(tr.iall_reduce(*world, bucket, ReduceOp::Average));
  }
  wait_all(reqs);
  for (int b = 0; b < 12; ++b)
    for (int k = 0; k < 3; ++k)
      EXPECT_TRUE(bitwise_equal(buckets[b][k], expected(world->ranks(), 100 + 3 * b + k,
                                                        37 * (b + 1) + k, ReduceOp::Average)))
          << b << "/" << k;
}

TEST(CommAllReduce, SingleMemberGroupIsIdentity) {
  auto& tr = transport();
  auto self = tr.make_group({tr.rank()});
  Tensor x = Tensor::full({3}, 1.5f);
  tr.all_reduce(*self, {x}, ReduceOp::Average);
  EXPECT_EQ(x.f32()[2], 1.5f);
}

TEST(CommAllReduce, BarrierAndStopVote) {
  auto& tr = transport();
  tr.barrier();
  tr.barrier(*tr.make_group({0, 1, 2, 3}));
  EXPECT_FALSE(tr.any_rank_stopping());
}

}  // namespace
}  // namespace pd

namespace pd {
namespace {

TEST(CommGradientBuckets, BucketsStartDuringBackwardInOrderAndSum) {
  auto& tr = pd::testing::transport();
  auto world = tr.world_group();
  // Six layers (backward order) of one 4 kB gradient each, buckets of at
  // least 8 kB: three buckets of two layers.
  std::vector<std::vector<Tensor>> layers;
  for (int k = 0; k < 6; ++k) layers.push_back({Tensor::full({1000}, float(tr.rank() * 10 + k))});
  GradientBuckets buckets(tr, world, layers, 8000);
  ASSERT_EQ(buckets.bucket_count(), 3u);
  EXPECT_EQ(buckets.buckets()[1].layers, (std::vector<size_t>{2, 3}));
  const float n = static_cast<float>(tr.world_size());
  float expected_base = 0;  // sum over ranks r of 10 r
  for (int r = 0; r < tr.world_size(); ++r) expected_base += 10.0f * r;
  for (int round = 0; round < 2; ++round) {
    // Replicas finish layers in different orders; buckets still start in
    // bucket order once complete.
    std::vector<size_t> order = tr.rank() % 2 ? std::vector<size_t>{1, 0, 3, 2, 5, 4}
                                              : std::vector<size_t>{0, 1, 2, 3, 4, 5};
    buckets.layer_done(order[0]);
    EXPECT_EQ(buckets.buckets_started(), 0u);
    buckets.layer_done(order[1]);
    EXPECT_EQ(buckets.buckets_started(), 1u);  // started before backward ends
    for (size_t k = 2; k < 6; ++k) buckets.layer_done(order[k]);
    EXPECT_EQ(buckets.buckets_started(), 3u);
    buckets.end_round();
    EXPECT_EQ(buckets.buckets_started(), 0u);  // re-armed
    for (int k = 0; k < 6; ++k) {
      // Round 1: the sum over ranks of (10 r + k); round 2 sums that n times.
      const float once = expected_base + n * static_cast<float>(k);
      EXPECT_EQ(layers[k][0].f32()[999], round == 0 ? once : n * once) << "round " << round << " layer " << k;
    }
  }
}

TEST(CommGradientBuckets, EndRoundStartsBucketsBackwardNeverReported) {
  auto& tr = pd::testing::transport();
  auto world = tr.world_group();
  std::vector<std::vector<Tensor>> layers = {{Tensor::full({10}, 1.0f)}, {}, {Tensor::full({10}, 2.0f)}};
  GradientBuckets buckets(tr, world, layers, 1);  // one bucket per layer with parameters
  ASSERT_EQ(buckets.bucket_count(), 2u);
  EXPECT_FALSE(buckets.test());  // nothing started yet
  buckets.end_round();
  EXPECT_EQ(layers[0][0].f32()[9], static_cast<float>(tr.world_size()));
  EXPECT_EQ(layers[2][0].f32()[9], 2.0f * static_cast<float>(tr.world_size()));
}

}  // namespace
}  // namespace pd
