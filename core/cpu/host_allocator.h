#pragma once
// The CPU allocator behind Tensor::empty on the host: 64-byte aligned
// blocks, with a cache of freed blocks by size class.
//
// A training step frees and re-allocates the same activation and gradient
// sizes every step. Straight from malloc, large blocks are fresh mmap'd
// pages that page-fault on first touch (about 1,100 faults and ~7% of a
// `cnn` step's CPU time); from the cache they are warm. The cache never
// holds more than the largest number of bytes ever live at once (at least
// 256 MiB), so a process uses at most about twice its peak working set.
// Set PIPEDREAM_HOST_CACHE=0 to allocate and free every block directly
// (for memory checkers and for debugging use-after-free).
// Blocks of 2 MiB or more are 2 MiB-aligned and advised to use transparent
// huge pages: with 4 KiB pages the same vgg-mini step ran at 30 ms in some
// processes and 40 ms in others (physical pages map onto cache sets
// differently each run); with huge pages 30.3-32.3 ms in four runs.
// PIPEDREAM_HUGE_PAGES=0 turns that off.
#include <cstddef>

#include "core/tensor.h"

namespace pd::cpu {

Allocator& host_allocator();

struct HostCacheStats {
  size_t cached_bytes = 0;  // held in the cache, not live
  size_t hits = 0, misses = 0;
  bool enabled = true;
};
HostCacheStats host_cache_stats();

// Frees every cached block (live tensors are untouched). Runs at exit too.
void release_host_cache();

// The size a request of `bytes` is served with: blocks of one class are
// interchangeable. Exposed for tests.
size_t host_size_class(size_t bytes);

}  // namespace pd::cpu
