#pragma once
// Caching device allocator. cudaMalloc and cudaFree synchronise the device,
// so freed blocks are kept in size-class bins and handed out again.
// Reuse is stream-ordered: a block freed by its allocation stream may be
// reused at once by later work on that stream (the stream runs in order);
// a block that another stream also used (record_stream) returns to the
// bins only once an event recorded on that stream at free time has fired.
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/tensor.h"

namespace pd::cuda {

struct MemoryStats {
  size_t in_use = 0;          // bytes held by live tensors (rounded sizes)
  size_t peak_in_use = 0;
  size_t reserved = 0;        // bytes obtained from cudaMalloc (in use + cached)
  size_t peak_reserved = 0;
  size_t cuda_mallocs = 0;    // calls that went to the driver
  size_t cache_hits = 0;
};

class CachingAllocator : public Allocator {
 public:
  explicit CachingAllocator(int device) : device_(device) {}
  // Allocations are ordered on the compute stream.
  std::shared_ptr<Storage> allocate(size_t bytes) override;
  std::shared_ptr<Storage> allocate_on(size_t bytes, cudaStream_t stream);
  size_t current_bytes() const override;
  size_t peak_bytes() const override;
  void reset_peak() override;
  MemoryStats stats() const;
  // Marks storage as used by `stream` too: its block is not reused before
  // the work queued on `stream` up to its free has finished.
  void record_stream(const Storage& s, cudaStream_t stream);
  // Returns cached blocks to the driver (after the device is idle).
  void release_cached();

  // Size classes: 512-byte granules below 1 MiB, 2 MiB granules above.
  static size_t round_size(size_t bytes);

  struct Block {
    void* ptr = nullptr;
    size_t size = 0;
    cudaStream_t stream = nullptr;
    std::vector<cudaStream_t> used_by;  // other streams (record_stream)
  };
  void free_block(Block* b);  // called by the storage's destructor

 private:
  void collect_pending_locked();
  void free_cached_locked();
  Block* take_cached_locked(size_t size, cudaStream_t stream);

  int device_;
  mutable std::mutex mu_;
  // Free blocks by (stream, size): best fit = lower_bound of the size.
  std::map<cudaStream_t, std::multimap<size_t, Block*>> bins_;
  struct Pending {
    Block* block;
    std::vector<cudaEvent_t> events;
  };
  std::vector<Pending> pending_;
  std::map<void*, Block*> live_;
  MemoryStats st_;
};

// The allocator of the initialised device (created by initialize_backend).
CachingAllocator& device_allocator();

// Page-locked host memory for staging transfers (transport, D2H of
// results); cudaHostAlloc'd, freed on destruction.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  explicit PinnedBuffer(size_t bytes);
  ~PinnedBuffer();
  PinnedBuffer(PinnedBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* data() const { return ptr_; }
  size_t size() const { return bytes_; }
  // Grows (never shrinks) to at least `bytes`.
  void reserve(size_t bytes);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace pd::cuda
