#include <gtest/gtest.h>

#include <cstdint>
#include <thread>
#include <vector>

#include "core/cpu/host_allocator.h"
#include "core/tensor.h"

namespace pd {

TEST(HostAllocator, SizeClassesCoverTheRequestWithBoundedSlack) {
  for (size_t bytes : {1ul, 63ul, 64ul, 4000ul, 16384ul, 16385ul, 100000ul, 6422528ul, 123456789ul}) {
    const size_t c = cpu::host_size_class(bytes);
    EXPECT_GE(c, bytes);
    EXPECT_EQ(c % 64, 0u);
    EXPECT_LE(c, bytes + bytes / 8 + 4096) << bytes;
    EXPECT_EQ(cpu::host_size_class(c), c) << "a class must map to itself";
  }
  EXPECT_EQ(cpu::host_size_class(0), 0u);
}

TEST(HostAllocator, FreedBlocksAreReusedAndLiveBytesStayExact) {
  if (!cpu::host_cache_stats().enabled) GTEST_SKIP() << "PIPEDREAM_HOST_CACHE=0";
  Allocator& a = allocator_for(Device::cpu());
  const size_t live_before = a.current_bytes();
  void* first = nullptr;
  {
    Tensor t = Tensor::empty({1000, 300});
    first = t.raw();
    EXPECT_EQ(reinterpret_cast<uintptr_t>(first) % 64, 0u);
    EXPECT_EQ(a.current_bytes(), live_before + 1200000);
  }
  EXPECT_EQ(a.current_bytes(), live_before);
  EXPECT_GE(cpu::host_cache_stats().cached_bytes, 1200000u);
  const size_t hits = cpu::host_cache_stats().hits;
  Tensor again = Tensor::empty({300, 1000});  // same bytes, another shape
  EXPECT_EQ(again.raw(), first);
  EXPECT_EQ(cpu::host_cache_stats().hits, hits + 1);

  cpu::release_host_cache();
  EXPECT_EQ(cpu::host_cache_stats().cached_bytes, 0u);
}

TEST(HostAllocator, ConcurrentAllocationAndFreeKeepBlocksDistinct) {
  Allocator& a = allocator_for(Device::cpu());
  const size_t live_before = a.current_bytes();
  auto work = [](int seed) {
    for (int i = 0; i < 200; ++i) {
      Tensor x = Tensor::full({64, 1024}, static_cast<float>(seed));
      Tensor y = Tensor::full({64, 1024 + 64 * (i % 3)}, static_cast<float>(-seed));
      // Another thread writing into a block we hold would show here.
      ASSERT_EQ(x.f32()[12345], static_cast<float>(seed));
      ASSERT_EQ(y.f32()[777], static_cast<float>(-seed));
    }
  };
  std::vector<std::thread> threads;
  for (int t = 1; t <= 4; ++t) threads.emplace_back(work, t);
  for (auto& t : threads) t.join();
  EXPECT_EQ(a.current_bytes(), live_before);
}

}  // namespace pd
