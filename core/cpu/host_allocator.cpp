#include "core/cpu/host_allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <bit>
#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/cpu/environment_switch.h"
#include "core/error.h"

namespace pd::cpu {

namespace {

// Below this glibc serves blocks from its arenas without page faults, and
// caching them would only add a lock.
constexpr size_t kMinCachedBytes = 16 * 1024;
constexpr size_t kMinCacheCapacity = size_t{256} << 20;

constexpr size_t kHugePage = size_t{2} << 20;

// Blocks of 2 MiB and more start on a 2 MiB boundary and ask for
// transparent huge pages (Linux's default mode is "madvise"): physically
// contiguous 2 MiB pages map a tensor onto the caches the same way in
// every process, where 4 KiB pages land on different cache sets each run
// and made the same layer 5-25% slower in one process than in the next.
void* aligned_block(size_t bytes) {
  static const bool huge = environment_switch_on("PIPEDREAM_HUGE_PAGES");
  const bool big = huge && bytes >= kHugePage;
  const size_t alignment = big ? kHugePage : 64;
  const size_t rounded = (bytes + alignment - 1) / alignment * alignment;
  void* p = std::aligned_alloc(alignment, rounded);
  if (!p) throw RuntimeFailure(cat("out of host memory allocating ", bytes, " bytes"));
  if (big) madvise(p, rounded, MADV_HUGEPAGE);  // advice only: failure changes nothing
  return p;
}

class HostAllocator;
void give_back(void* block, size_t size_class, size_t bytes);

struct HostStorage : Storage {
  size_t size_class = 0;
  ~HostStorage() override { give_back(data, size_class, bytes); }
};

class HostAllocator : public Allocator {
 public:
  std::shared_ptr<Storage> allocate(size_t bytes) override {
    auto s = std::make_shared<HostStorage>();
    s->bytes = bytes;
    s->size_class = host_size_class(bytes);
    if (s->size_class) s->data = take(s->size_class);
    count_live(static_cast<int64_t>(bytes));
    return s;
  }
  size_t current_bytes() const override { return current_.load(); }
  size_t peak_bytes() const override { return peak_.load(); }
  void reset_peak() override { peak_.store(current_.load()); }

  void give_back(void* block, size_t size_class, size_t bytes) {
    count_live(-static_cast<int64_t>(bytes));
    if (!block) return;
    if (enabled_ && size_class >= kMinCachedBytes) {
      std::lock_guard lock(mutex_);
      if (!released_at_exit_ && cached_ + size_class <= capacity()) {
        free_[size_class].push_back(block);
        cached_ += size_class;
        return;
      }
    }
    std::free(block);
  }

  void release() {
    std::lock_guard lock(mutex_);
    for (auto& [size, blocks] : free_)
      for (void* b : blocks) std::free(b);
    free_.clear();
    cached_ = 0;
  }

  void release_at_exit() {
    release();
    std::lock_guard lock(mutex_);
    released_at_exit_ = true;
  }

  HostCacheStats stats() {
    std::lock_guard lock(mutex_);
    return {cached_, hits_, misses_, enabled_};
  }

 private:
  void* take(size_t size_class) {
    if (enabled_ && size_class >= kMinCachedBytes) {
      std::lock_guard lock(mutex_);
      auto it = free_.find(size_class);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= size_class;
        ++hits_;
        return p;
      }
      ++misses_;
    }
    return aligned_block(size_class);
  }

  size_t capacity() const { return std::max(kMinCacheCapacity, high_water_.load()); }

  void count_live(int64_t delta) {
    const size_t now = current_.fetch_add(static_cast<size_t>(delta)) + static_cast<size_t>(delta);
    for (std::atomic<size_t>* mark : {&peak_, &high_water_}) {
      size_t p = mark->load();
      while (now > p && !mark->compare_exchange_weak(p, now)) {
      }
    }
  }

  const bool enabled_ = environment_switch_on("PIPEDREAM_HOST_CACHE");
  std::atomic<size_t> current_{0}, peak_{0};
  std::atomic<size_t> high_water_{0};  // like peak_, but never reset: sizes the cache
  std::mutex mutex_;
  std::unordered_map<size_t, std::vector<void*>> free_;
  size_t cached_ = 0, hits_ = 0, misses_ = 0;
  bool released_at_exit_ = false;
};

// Never destroyed: tensors in other static objects may be freed after
// this file's statics are gone. ReleaseAtExit hands the cache back instead.
HostAllocator& instance() {
  static HostAllocator* a = new HostAllocator;
  return *a;
}

void give_back(void* block, size_t size_class, size_t bytes) { instance().give_back(block, size_class, bytes); }

struct ReleaseAtExit {
  ReleaseAtExit() { instance(); }
  ~ReleaseAtExit() { instance().release_at_exit(); }
} release_at_exit;

}  // namespace

size_t host_size_class(size_t bytes) {
  if (bytes == 0) return 0;
  const size_t rounded = (bytes + 63) / 64 * 64;
  if (rounded < kMinCachedBytes) return rounded;
  // Granularity of an eighth of the power of two below: at most 12.5%
  // slack, and a handful of classes per doubling.
  const size_t step = std::max<size_t>(4096, std::bit_floor(rounded) / 8);
  return (rounded + step - 1) / step * step;
}

Allocator& host_allocator() { return instance(); }
HostCacheStats host_cache_stats() { return instance().stats(); }
void release_host_cache() { instance().release(); }

}  // namespace pd::cpu
