// The same-host shared-memory path of the MPI transport against its MPI
// path: the same bits for point-to-point and all-reduce, odd sizes,
// messages larger than a ring, many messages in flight in 1F1B order, and
// nothing left in /dev/shm. Run under mpirun with 2 ranks and small rings
// (PIPEDREAM_SHM_RING_BYTES, see tests/CMakeLists.txt).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <numeric>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "runtime/comm/mpi_transport.h"
#include "tests/integration/comm_mpi/mpi_test_main.h"

namespace pd::testing {
namespace {

// Both ranks switch paths together (tests run in lockstep).
struct OnPath {
  explicit OnPath(bool shm) { EXPECT_EQ(transport().use_shared_memory(shm), shm); }
  ~OnPath() { transport().use_shared_memory(true); }
};

Tensor random_floats(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> d(0.0f, 1e3f);
  Tensor t = Tensor::empty({n});
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = d(gen);
  return t;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Rank 0 sends t to rank 1 through the chosen path; rank 1 returns what arrived.
Tensor exchange(const Tensor& t, bool shm, int tag) {
  OnPath path(shm);
  auto& tr = transport();
  if (tr.rank() == 0) {
    tr.isend(t, 1, tag, 77).wait();
    return t;
  }
  Request r = tr.irecv_any(0, tag);
  r.wait();
  EXPECT_EQ(r.meta(), 77);
  return r.tensor();
}

TEST(CommShm, RanksOfOneHostUseSharedMemory) {
  auto& tr = transport();
  ASSERT_GE(tr.world_size(), 2);
  EXPECT_TRUE(tr.uses_shared_memory((tr.rank() + 1) % tr.world_size()));
  EXPECT_TRUE(tr.uses_shared_memory(*tr.world_group()));
  EXPECT_FALSE(tr.uses_shared_memory(tr.rank()));
}

TEST(CommShm, PointToPointCarriesTheSameBitsAsMpiAtOddSizes) {
  // Ring of 64 KiB in this test program: the largest sizes span many rings.
  for (int64_t n : {0, 1, 3, 17, 1023, 16411, 100003, 1000003}) {
    Tensor t = random_floats(n, static_cast<uint32_t>(n));
    Tensor via_shm = exchange(t, true, 3);
    Tensor via_mpi = exchange(t, false, 3);
    EXPECT_TRUE(same_bits(via_shm, t)) << n << " floats";
    EXPECT_TRUE(same_bits(via_shm, via_mpi)) << n << " floats";
  }
  Tensor ints = Tensor::empty({3, 5, 7}, DType::I64);
  for (int64_t i = 0; i < ints.numel(); ++i) ints.data<int64_t>()[i] = i * 1000003 - 5;
  EXPECT_TRUE(same_bits(exchange(ints, true, 4), ints));
}

TEST(CommShm, AllReduceHasTheBitsOfTheMpiPath) {
  auto& tr = transport();
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
    for (int64_t n : {1, 7, 4097, 65537, 1000003}) {
      const Tensor x = random_floats(n, static_cast<uint32_t>(n * 2 + tr.rank()));
      Tensor a = x.clone(), b = x.clone();
      {
        OnPath path(true);
        tr.all_reduce(*tr.world_group(), {a}, op);
      }
      {
        OnPath path(false);
        tr.all_reduce(*tr.world_group(), {b}, op);
      }
      EXPECT_TRUE(same_bits(a, b)) << n << " floats, op " << static_cast<int>(op);
    }
  }
}

TEST(CommShm, BucketOfOddTensorsAndManyAllReducesInFlight) {
  auto& tr = transport();
  // Every rank: with 3, chunks cut the tensors at other places than with 2
  // and an owner beyond the first two adds its own part in rank order.
  std::vector<int> everyone(static_cast<size_t>(tr.world_size()));
  std::iota(everyone.begin(), everyone.end(), 0);
  auto g = tr.make_group(everyone);
  std::vector<std::vector<Tensor>> shm_buckets, mpi_buckets;
  for (int k = 0; k < 6; ++k) {
    std::vector<Tensor> bucket;
    for (int64_t n : {5, 33333, 1}) bucket.push_back(random_floats(n + k, static_cast<uint32_t>(k * 7 + n + tr.rank())));
    std::vector<Tensor> copy;
    for (auto& t : bucket) copy.push_back(t.clone());
    shm_buckets.push_back(bucket);
    mpi_buckets.push_back(copy);
  }
  for (bool shm : {true, false}) {
    OnPath path(shm);
    std::vector<Request> inflight;
    for (auto& b : shm ? shm_buckets : mpi_buckets) inflight.push_back(tr.iall_reduce(*g, b, ReduceOp::Average));
    wait_all(inflight);
  }
  for (size_t k = 0; k < shm_buckets.size(); ++k)
    for (size_t i = 0; i < shm_buckets[k].size(); ++i)
      EXPECT_TRUE(same_bits(shm_buckets[k][i], mpi_buckets[k][i])) << "bucket " << k << " tensor " << i;
}

// The traffic of a 2-stage 1F1B pipeline: activations forward, gradients
// back, receives posted out of order, several microbatches in flight, and
// messages many times the ring's size.
TEST(CommShm, OneFOneBTrafficInFlight) {
  auto& tr = transport();
  constexpr int kMicro = 8;
  constexpr int64_t kAct = 150001;  // about 9 rings of 64 KiB
  auto act_of = [](int m) { return random_floats(kAct, 100 + m); };
  auto grad_of = [](int m) { return random_floats(kAct / 2 + m, 200 + m); };
  if (tr.rank() == 0) {
    std::vector<Request> sends, grads;
    std::vector<Tensor> got;
    for (int m = 0; m < kMicro; ++m) sends.push_back(tr.isend(act_of(m), 1, 2 * m, m));
    // Gradient receives posted last-first: matching is by tag, not order.
    for (int m = kMicro - 1; m >= 0; --m) {
      got.insert(got.begin(), Tensor::empty({kAct / 2 + m}));
      grads.insert(grads.begin(), tr.irecv(got.front(), 1, 2 * m + 1));
    }
    wait_all(sends);
    wait_all(grads);
    for (int m = 0; m < kMicro; ++m) {
      EXPECT_TRUE(same_bits(got[m], grad_of(m))) << "gradient " << m;
      EXPECT_EQ(grads[m].meta(), 1000 + m);
    }
  } else {
    // Warm-up of two forwards, then one forward one backward.
    std::vector<Request> sends;
    for (int m = 0; m < kMicro; ++m) {
      Request a = m % 2 ? tr.irecv_any(0, 2 * m) : tr.irecv(Tensor::empty({kAct}), 0, 2 * m);
      a.wait();
      EXPECT_TRUE(same_bits(a.tensor(), act_of(m))) << "activation " << m;
      EXPECT_EQ(a.meta(), m);
      if (m >= 1) sends.push_back(tr.isend(grad_of(m - 1), 0, 2 * (m - 1) + 1, 1000 + m - 1));
    }
    sends.push_back(tr.isend(grad_of(kMicro - 1), 0, 2 * (kMicro - 1) + 1, 1000 + kMicro - 1));
    wait_all(sends);
  }
}

// What a worker holds follows its own actions, not its peers' timing: a
// send that fits the ring is written on the caller's thread (its tensor is
// free when isend returns), and a message stays in the ring, not in the
// receiver's tensors, until its receive is first tested or waited on (a
// pipeline posts receives many actions ahead).
TEST(CommShm, AMessageBecomesTheReceiversOnlyWhenItsReceiveIsTaken) {
  auto& tr = transport();
  constexpr int64_t kFloats = 4096;  // 16 KiB: fits the 64 KiB ring
  Allocator& host = allocator_for(Device::cpu());
  tr.barrier();
  if (tr.rank() == 0) {
    usleep(50000);  // rank 1 posts its receive
    Request s = tr.isend(random_floats(kFloats, 5), 1, 9, 0);
    EXPECT_TRUE(s.test()) << "a send that fits the ring completes on the caller's thread";
    tr.barrier();
    return;
  }
  Request r = tr.irecv_any(0, 9);
  const int64_t before = static_cast<int64_t>(host.current_bytes());
  // No barrier until the receive is taken: waiting on one would post its
  // all-reduce's receive from rank 0, and the message ahead of it in the
  // same ring would be buffered (by design).
  usleep(300000);  // the message arrives; time for any thread to take it early
  // Half the message as the line: the barrier's token may be freed meanwhile.
  EXPECT_LT(static_cast<int64_t>(host.current_bytes()) - before, kFloats * 2) << "taken before its receive was";
  r.wait();
  EXPECT_GT(static_cast<int64_t>(host.current_bytes()) - before, kFloats * 2) << "the receive's tensor";
  EXPECT_TRUE(same_bits(r.tensor(), random_floats(kFloats, 5)));
  tr.barrier();
}

// A receiver asleep on its ring is woken by its sender's write: a lost
// wake-up would show as the 100 ms the sleeper waits at most before it
// looks again. The median over trials keeps a slow moment of the host out.
TEST(CommShm, ASleepingReceiverIsWokenByItsSendersWrite) {
  auto& tr = transport();
  constexpr int kTrials = 15;
  std::vector<double> late_ms;
  for (int k = 0; k < kTrials; ++k) {
    tr.barrier();
    if (tr.rank() == 0) {
      usleep(20000);  // rank 1 is asleep on its receive by now
      const auto sent = std::chrono::steady_clock::now().time_since_epoch();
      tr.isend(random_floats(1000, k), 1, 11, std::chrono::duration_cast<std::chrono::nanoseconds>(sent).count())
          .wait();
      continue;
    }
    Request r = tr.irecv(Tensor::empty({1000}), 0, 11);
    r.wait();
    const auto now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                         std::chrono::steady_clock::now().time_since_epoch())
                         .count();
    late_ms.push_back(static_cast<double>(now - r.meta()) / 1e6);
    EXPECT_TRUE(same_bits(r.tensor(), random_floats(1000, k)));
  }
  if (tr.rank() == 1) {
    std::sort(late_ms.begin(), late_ms.end());
    EXPECT_LT(late_ms[kTrials / 2], 50.0) << "median ms from the send to the woken receiver";
  }
}

// A tensor receive whose message sits behind a collective's from the same
// peer: the waiting caller leaves the collective's bytes to the progress
// thread, which buffers them and takes the tensor message behind, and the
// caller, asleep on the ring, is woken. Receiver asleep first, then the
// receiver arriving when both messages are in the ring.
TEST(CommShm, AReceiveBehindACollectivesMessageCompletes) {
  auto& tr = transport();
  constexpr int64_t kFloats = 4096;  // both messages fit the 64 KiB ring
  for (bool receiver_first : {true, false}) {
    const int tag = receiver_first ? 12 : 13;
    const Tensor x0 = random_floats(kFloats, 1), x1 = random_floats(kFloats, 2);
    Tensor mine = (tr.rank() == 0 ? x0 : x1).clone();
    tr.barrier();
    if (tr.rank() == 0) {
      if (receiver_first) usleep(50000);
      Request ar = tr.iall_reduce(*tr.world_group(), {mine}, ReduceOp::Sum);
      usleep(20000);  // the progress thread writes its piece for rank 1 first
      tr.isend(random_floats(1000, tag), 1, tag, 0).wait();
      ar.wait();
    } else {
      if (!receiver_first) usleep(100000);
      Request r = tr.irecv(Tensor::empty({1000}), 0, tag);
      r.wait();
      EXPECT_TRUE(same_bits(r.tensor(), random_floats(1000, tag))) << "receiver first " << receiver_first;
      tr.iall_reduce(*tr.world_group(), {mine}, ReduceOp::Sum).wait();
    }
    Tensor sum = Tensor::empty({kFloats});
    for (int64_t i = 0; i < kFloats; ++i) sum.f32()[i] = x0.f32()[i] + x1.f32()[i];
    EXPECT_TRUE(same_bits(mine, sum)) << "rank " << tr.rank() << ", receiver first " << receiver_first;
  }
  tr.barrier();
}

TEST(CommShm, ShapeMismatchIsNamedAndTheNextMessageStillArrives) {
  auto& tr = transport();
  if (tr.rank() == 0) {
    tr.isend(Tensor::zeros({2, 3}), 1, 9).wait();
    tr.isend(Tensor::full({4}, 2.5f), 1, 9).wait();
  } else {
    Request bad = tr.irecv(Tensor::zeros({3, 2}), 0, 9);
    try {
      bad.wait();
      ADD_FAILURE() << "a [2, 3] tensor was accepted into [3, 2]";
    } catch (const RuntimeFailure& e) {
      EXPECT_NE(std::string(e.what()).find("expected [3, 2] f32 but rank 0 sent [2, 3] f32"), std::string::npos)
          << e.what();
    }
    Tensor good = Tensor::zeros({4});
    tr.irecv(good, 0, 9).wait();
    EXPECT_EQ(good.to_floats(), std::vector<float>(4, 2.5f));
  }
}

TEST(CommShm, NothingIsLeftInDevShm) {
  // The segment is unlinked once every rank has mapped it, at start-up.
  std::vector<std::string> left;
  std::error_code ec;
  const std::string mine = "pipedream-" + std::to_string(getpid()) + "-";
  for (auto& e : std::filesystem::directory_iterator("/dev/shm", ec))
    if (e.path().filename().string().rfind(mine, 0) == 0) left.push_back(e.path());
  EXPECT_TRUE(left.empty()) << left.front();
}

}  // namespace
}  // namespace pd::testing
