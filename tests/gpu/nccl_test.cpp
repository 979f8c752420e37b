// NCCL communicator on one process: a single-rank communicator exercises
// bootstrap, all-reduce, split and abort without a second GPU. Multi-rank
// send/recv needs two GPUs and MPI; the runtime's integration tests own it.
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include "core/cuda/nccl_comm.h"
#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

using CudaNccl = GpuTest;

TEST_F(CudaNccl, SingleRankAllReduceSplitAndAbort) {
  if (!cuda::nccl_available()) GTEST_SKIP() << "built without NCCL";
  auto id = cuda::NcclCommunicator::make_unique_id();
  cuda::NcclCommunicator comm(id, 1, 0);
  EXPECT_EQ(comm.size(), 1);
  auto v = random_floats(1000, 1);
  Tensor t = on_gpu(v);
  comm.all_reduce(t.f32(), v.size(), cuda::NcclType::F32, cuda::NcclReduce::Sum);
  comm.wait(30.0);
  comm.compute_waits_for_comm();
  EXPECT_EQ(host(t), v) << "a sum over one rank is the identity";
  comm.all_reduce(t.f32(), v.size(), cuda::NcclType::F32, cuda::NcclReduce::Average);
  comm.wait(30.0);
  comm.compute_waits_for_comm();
  EXPECT_EQ(host(t), v);
  auto sub = comm.split(0, 0);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->rank(), 0);
  EXPECT_EQ(comm.split(-1, 0), nullptr);
  comm.check_async_error();
  sub->abort();
  sub->abort();  // idempotent
}

TEST_F(CudaNccl, SendRecvToSelfInAGroup) {
  if (!cuda::nccl_available()) GTEST_SKIP() << "built without NCCL";
  cuda::NcclCommunicator comm(cuda::NcclCommunicator::make_unique_id(), 1, 0);
  auto v = random_floats(257, 2);
  Tensor src = on_gpu(v), dst = gpu_zeros(v.size());
  cuda::NcclCommunicator::group_start();
  comm.send(src.f32(), v.size(), cuda::NcclType::F32, 0);
  comm.recv(dst.f32(), v.size(), cuda::NcclType::F32, 0);
  cuda::NcclCommunicator::group_end();
  comm.wait(30.0);
  comm.compute_waits_for_comm();
  EXPECT_EQ(host(dst), v);
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA
