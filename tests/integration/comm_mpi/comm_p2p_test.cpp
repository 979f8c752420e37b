// Point-to-point behaviour of the MPI transport (run with 3 ranks).
#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "tests/integration/comm_mpi/mpi_test_main.h"

namespace pd {
namespace {

using pd::testing::transport;

Tensor pattern(int64_t n, float base) {
  Tensor t = Tensor::empty({n});
  for (int64_t i = 0; i < n; ++i) t.f32()[i] = base + static_cast<float>(i);
  return t;
}

void expect_pattern(const Tensor& t, float base) {
  ASSERT_TRUE(t.defined());
  for (int64_t i = 0; i < t.numel(); ++i) ASSERT_EQ(t.f32()[i], base + static_cast<float>(i)) << i;
}

TEST(CommP2P, TagsReceivedInAnyOrder) {
  auto& tr = transport();
  constexpr int kTags = 10;
  if (tr.rank() == 0) {
    std::vector<Request> sends;
    for (int tag = 0; tag < kTags; ++tag) sends.push_back(tr.isend(pattern(100 + tag, tag * 1000.f), 1, tag, 7 * tag));
    wait_all(sends);
  } else if (tr.rank() == 1) {
    // Post in reverse order and wait on the last-sent first.
    std::vector<Request> recvs(kTags);
    for (int tag = kTags - 1; tag >= 0; --tag) recvs[tag] = tr.irecv(Tensor::empty({100 + tag}), 0, tag);
    for (int tag = kTags - 1; tag >= 0; --tag) {
      recvs[tag].wait();
      expect_pattern(recvs[tag].tensor(), tag * 1000.f);
      EXPECT_EQ(recvs[tag].meta(), 7 * tag);
    }
  }
  tr.barrier();
}

TEST(CommP2P, SameTagKeepsSendOrderWithManyReceivesPosted) {
  // Every tensor is a header and a payload message; receives posted
  // together on one tag must still pair them up, for small (eager) and
  // large (rendezvous) payloads, known and unknown shapes.
  auto& tr = transport();
  const int n = 40;
  auto size_of = [](int i) -> int64_t { return i % 3 == 0 ? 70000 : 3 + i; };
  if (tr.rank() == 2) {
    std::vector<Request> s;
    for (int i = 0; i < n; ++i) s.push_back(tr.isend(pattern(size_of(i), float(i)), 0, 5, i));
    wait_all(s);
  } else if (tr.rank() == 0) {
    std::vector<Request> r;
    for (int i = 0; i < n; ++i)
      r.push_back(i % 2 ? tr.irecv_any(2, 5) : tr.irecv(Tensor::empty({size_of(i)}), 2, 5));
    for (int i = n - 1; i >= 0; --i) {
      r[i].wait();
      EXPECT_EQ(r[i].meta(), i);
      EXPECT_EQ(r[i].tensor().numel(), size_of(i));
      expect_pattern(r[i].tensor(), float(i));
    }
  }
  tr.barrier();
}

TEST(CommP2P, ManyMessagesInFlightBetweenAllPairs) {
  auto& tr = transport();
  const int me = tr.rank(), world = tr.world_size();
  constexpr int kPerPeer = 64;
  std::vector<Request> sends, recvs;
  std::vector<std::pair<int, int>> expected;  // (peer, index)
  for (int peer = 0; peer < world; ++peer) {
    if (peer == me) continue;
    for (int i = 0; i < kPerPeer; ++i) {
      // Mixed sizes: eager and rendezvous protocols at once.
      int64_t n = (i % 4 == 0) ? 100000 : 17 + i;
      sends.push_back(tr.isend(pattern(n, me * 1e6f + i), peer, i));
      recvs.push_back(tr.irecv(Tensor::empty({(i % 4 == 0) ? 100000 : 17 + i}), peer, i));
      expected.push_back({peer, i});
    }
  }
  wait_all(recvs);
  wait_all(sends);
  for (size_t k = 0; k < recvs.size(); ++k) {
    auto [peer, i] = expected[k];
    Tensor t = recvs[k].tensor();
    EXPECT_EQ(t.f32()[0], peer * 1e6f + i);
    EXPECT_EQ(t.f32()[t.numel() - 1], peer * 1e6f + i + float(t.numel() - 1));
  }
  tr.barrier();
}

TEST(CommP2P, ReceiveOfUnknownShapeAndDtype) {
  auto& tr = transport();
  if (tr.rank() == 1) {
    tr.isend(Tensor::from_ints({1, 2, 3, 4, 5, 6}, {2, 3}), 2, 11, -42).wait();
    tr.isend(Tensor::zeros({0, 4}), 2, 12).wait();
  } else if (tr.rank() == 2) {
    Request r = tr.irecv_any(1, 11);
    r.wait();
    Tensor t = r.tensor();
    EXPECT_EQ(t.shape(), (Shape{2, 3}));
    EXPECT_EQ(t.dtype(), DType::I32);
    EXPECT_EQ(t.data<int32_t>()[5], 6);
    EXPECT_EQ(r.meta(), -42);
    Request e = tr.irecv_any(1, 12);
    e.wait();
    EXPECT_EQ(e.tensor().shape(), (Shape{0, 4}));
  }
  tr.barrier();
}

TEST(CommP2P, ShapeMismatchNamesBothShapes) {
  auto& tr = transport();
  if (tr.rank() == 0) {
    tr.isend(Tensor::zeros({2, 3}), 1, 21).wait(5);
    tr.isend(pattern(2, 9.f), 1, 21).wait(5);
  } else if (tr.rank() == 1) {
    Request r = tr.irecv(Tensor::empty({3, 2}), 0, 21);
    try {
      r.wait();
      FAIL() << "a shape mismatch must fail";
    } catch (const RuntimeFailure& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("[3, 2]"), std::string::npos) << msg;
      EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
      EXPECT_NE(msg.find("rank 0"), std::string::npos) << msg;
    }
    // The stream on that tag is still in step: the next message arrives.
    Request next = tr.irecv(Tensor::empty({2}), 0, 21);
    next.wait();
    expect_pattern(next.tensor(), 9.f);
  }
  tr.barrier();
}

TEST(CommP2P, TimeoutNamesTheSilentRank) {
  auto& tr = transport();
  if (tr.rank() == 0) {
    Request r = tr.irecv(Tensor::empty({4}), 2, 31);
    try {
      r.wait(0.3);
      FAIL() << "nothing was sent yet";
    } catch (const RuntimeFailure& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find("waiting for rank 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("tag 31"), std::string::npos) << msg;
    }
    tr.barrier();
    // The request survives the timeout and completes once the peer sends.
    r.wait();
    expect_pattern(r.tensor(), 5.f);
  } else {
    tr.barrier();
    if (tr.rank() == 2) tr.isend(pattern(4, 5.f), 0, 31).wait();
  }
  tr.barrier();
}

TEST(CommP2P, AllReduceTimeoutNamesTheMissingMember) {
  auto& tr = transport();
  auto g = tr.make_group({0, 1, 2});
  Tensor x = Tensor::full({10}, 1.0f);
  if (tr.rank() == 1) {
    // Rank 1 is late: the others give up naming it.
    tr.barrier();
    tr.all_reduce(*g, {x}, ReduceOp::Sum);
  } else {
    Request r = tr.iall_reduce(*g, {x}, ReduceOp::Sum);
    try {
      r.wait(0.3);
      FAIL() << "rank 1 has not joined";
    } catch (const RuntimeFailure& e) {
      EXPECT_NE(std::string(e.what()).find("waiting for rank 1"), std::string::npos) << e.what();
    }
    tr.barrier();
    r.wait();
  }
  EXPECT_EQ(x.f32()[9], 3.0f);
  tr.barrier();
}

TEST(CommP2P, SendsOverlapCompute) {
  // A large transfer completes while the receiver's main thread is busy
  // and never calls into the transport: the communication thread moves it.
  auto& tr = transport();
  const int64_t n = 4 << 20;  // 16 MB
  if (tr.rank() == 0) {
    tr.isend(pattern(n, 1.f), 1, 41).wait();
  } else if (tr.rank() == 1) {
    Request r = tr.irecv(Tensor::empty({n}), 0, 41);
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (!r.test() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // "compute"
    EXPECT_TRUE(r.test());
    expect_pattern(r.tensor(), 1.f);
  }
  tr.barrier();
}

TEST(CommP2P, RanksAndHosts) {
  auto& tr = transport();
  EXPECT_EQ(tr.world_size(), 3);
  EXPECT_TRUE(launched_under_mpi());
  EXPECT_FALSE(tr.host_of(tr.rank()).empty());
  EXPECT_FALSE(Transport::stop_requested());
  EXPECT_FALSE(tr.any_rank_stopping());
}

}  // namespace
}  // namespace pd

// A receive left unmatched at shutdown: CommFault.UnmatchedReceiveIsCancelledAtShutdown
// (tests/integration/comm_fault_test.cpp) runs its own job, since shutting
// down is the end of a transport.
