// Backend plumbing: initialisation, caching allocator, copies, fills, events.
#if defined(PIPEDREAM_HAVE_CUDA)  // the whole file needs the CUDA backend
#include "core/cuda/allocator.h"
#include "core/cuda/backend.h"
#include "core/cuda/context.h"
#include "core/error.h"
#include "core/op_times.h"
#include "tests/gpu/gpu_test.h"

namespace pd::gputest {

// Runs everywhere: without a GPU, asking for one is a user error, not a crash.
TEST(CudaBackendNoGpu, InitialisingWithoutAGpuIsAUserError) {
  if (cuda::visible_device_count() > 0) GTEST_SKIP() << "a GPU is visible";
  EXPECT_THROW(cuda::initialize_backend(0), UserError);
  EXPECT_FALSE(cuda::backend_initialized());
  EXPECT_THROW(Tensor::empty({4}, DType::F32, Device::cuda(0)), UserError);
  EXPECT_THROW(device_ops(Device::cuda(0)), UserError);
}

// Pure arithmetic: runs everywhere.
TEST(CachingAllocatorSizes, RoundsToSizeClasses) {
  using A = cuda::CachingAllocator;
  EXPECT_EQ(A::round_size(0), 512u);
  EXPECT_EQ(A::round_size(1), 512u);
  EXPECT_EQ(A::round_size(513), 1024u);
  EXPECT_EQ(A::round_size((1u << 20) - 1), 1u << 20);
  EXPECT_EQ(A::round_size((1u << 20) + 1), 2u << 20);
  EXPECT_EQ(A::round_size(5u << 20), 6u << 20);
}

TEST(CudaVersions, NamesTheToolkit) { EXPECT_NE(std::string(cuda::versions()).find("CUDA "), std::string::npos); }

using CudaBackend = GpuTest;

TEST_F(CudaBackend, InitialiseIsIdempotentAndRejectsASecondDevice) {
  EXPECT_NO_THROW(cuda::initialize_backend(0));
  EXPECT_THROW(cuda::initialize_backend(cuda::visible_device_count()), UserError);
}

TEST_F(CudaBackend, RoundTripCopyAndFillEveryDtype) {
  std::vector<float> v = random_floats(1000, 1);
  Tensor g = on_gpu(v);
  EXPECT_EQ(g.device(), Device::cuda(0));
  EXPECT_EQ(host(g), v);
  Tensor g2 = g.clone();  // device to device
  EXPECT_EQ(host(g2), v);
  g2.fill(2.5f);
  EXPECT_EQ(host(g2), std::vector<float>(1000, 2.5f));
  Tensor i = Tensor::zeros({10}, DType::I32, Device::cuda(0));
  i.fill(7);
  EXPECT_EQ(host(i), std::vector<float>(10, 7.0f));
  Tensor l = Tensor::zeros({3}, DType::I64, Device::cuda(0));
  l.fill(-4);
  EXPECT_EQ(host(l), std::vector<float>(3, -4.0f));
  // Slices keep their offset across the device boundary.
  Tensor rows = Tensor::from_floats(v, {100, 10}).to(Device::cuda(0)).slice_rows(10, 20);
  std::vector<float> want(v.begin() + 100, v.begin() + 200);
  EXPECT_EQ(host(rows), want);
}

TEST_F(CudaBackend, AllocatorReusesFreedBlocksAndCountsBytes) {
  auto& a = cuda::device_allocator();
  size_t before = a.current_bytes();
  {
    // 10 MiB: a size class no other test uses, so the cache holds one such block.
    Tensor t = Tensor::empty({10 << 18}, DType::F32, Device::cuda(0));
    // A cached block of a larger class may serve it: at least 10 MiB is counted.
    EXPECT_GE(a.current_bytes(), before + (10u << 20));
    EXPECT_GE(a.peak_bytes(), a.current_bytes());
  }
  EXPECT_EQ(a.current_bytes(), before);
  size_t mallocs = a.stats().cuda_mallocs;
  Tensor again = Tensor::empty({10 << 18}, DType::F32, Device::cuda(0));
  EXPECT_EQ(a.stats().cuda_mallocs, mallocs) << "served from the cache, not cudaMalloc";
  a.reset_peak();
  EXPECT_EQ(a.peak_bytes(), a.current_bytes());
}

TEST_F(CudaBackend, BlockUsedByAnotherStreamWaitsForIt) {
  auto& a = cuda::device_allocator();
  auto s = a.allocate(14u << 20);  // a size class of its own
  void* p = s->data;
  a.record_stream(*s, cuda::comm_stream());
  s.reset();
  // The comm stream is idle, so the pending block becomes free on the next
  // allocation after its event has fired.
  cudaStreamSynchronize(cuda::comm_stream());
  auto again = a.allocate(14u << 20);
  EXPECT_EQ(again->data, p);
}

TEST_F(CudaBackend, EventsMeasureNonNegativeTime) {
  uint64_t a = ops->event_record();
  Tensor t = gpu_zeros(1 << 20);
  t.fill(1.0f);
  uint64_t b = ops->event_record();
  EXPECT_GE(ops->event_elapsed_ms(a, b), 0.0f);
  ops->event_release(a);
  ops->event_release(b);
  cuda::Event e1, e2;
  e1.record(cuda::compute_stream());
  cuda::stream_wait(cuda::comm_stream(), cuda::compute_stream());
  e2.record(cuda::comm_stream());
  EXPECT_GE(e2.elapsed_ms_since(e1), 0.0f);
  EXPECT_TRUE(e2.done());
}

// Op timing on the GPU: CUDA events around each entry, the GEMM's time
// counted (well above zero for 1024^3), the results unchanged.
TEST_F(CudaBackend, OpTimingTimesTheGpuEntriesWithTheirResults) {
  const int64_t n = 1024;
  Tensor a = on_gpu(random_floats(n * n, 1)), b = on_gpu(random_floats(n * n, 2));
  Tensor plain = gpu_zeros(n * n), timed = gpu_zeros(n * n);
  ops->gemm(false, false, n, n, n, 1.0f, a.f32(), n, b.f32(), n, 0.0f, plain.f32(), n);
  start_op_timing();
  for (int k = 0; k < 3; ++k)
    device_ops(Device::cuda(0)).gemm(false, false, n, n, n, 1.0f, a.f32(), n, b.f32(), n, 0.0f, timed.f32(), n);
  device_ops(Device::cuda(0)).add(n * n, timed.f32(), timed.f32(), timed.f32());
  const std::vector<OpTime> t = stop_op_timing();
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].op, "gemm");
  EXPECT_EQ(t[0].calls, 3);
  EXPECT_GT(t[0].ms, 0.01) << "three 2-GFLOP GEMMs";
  EXPECT_EQ(t[1].op, "add");
  const std::vector<float> p = host(plain), q = host(timed);
  for (size_t i = 0; i < p.size(); i += 4099) ASSERT_EQ(q[i], 2.0f * p[i]) << i;
}

}  // namespace pd::gputest

#endif  // PIPEDREAM_HAVE_CUDA
