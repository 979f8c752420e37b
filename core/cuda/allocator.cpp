#include "core/cuda/allocator.h"

#include <algorithm>

#include "core/cuda/check.h"
#include "core/cuda/context.h"

namespace pd::cuda {

namespace {

struct CudaStorage : Storage {
  CachingAllocator* owner = nullptr;
  CachingAllocator::Block* block = nullptr;
  ~CudaStorage() override {
    if (block) owner->free_block(block);
  }
};

constexpr size_t kSmall = 1 << 20;
constexpr size_t kSmallGranule = 512;
constexpr size_t kLargeGranule = 2 << 20;

}  // namespace

size_t CachingAllocator::round_size(size_t bytes) {
  if (bytes == 0) return kSmallGranule;
  size_t g = bytes < kSmall ? kSmallGranule : kLargeGranule;
  return (bytes + g - 1) / g * g;
}

std::shared_ptr<Storage> CachingAllocator::allocate(size_t bytes) {
  return allocate_on(bytes, compute_stream());
}

void CachingAllocator::collect_pending_locked() {
  for (size_t i = 0; i < pending_.size();) {
    Pending& p = pending_[i];
    bool done = std::all_of(p.events.begin(), p.events.end(), [](cudaEvent_t e) {
      cudaError_t r = cudaEventQuery(e);
      if (r == cudaErrorNotReady) return false;
      CUDA_CHECK(r);
      return true;
    });
    if (!done) {
      ++i;
      continue;
    }
    for (cudaEvent_t e : p.events) CUDA_CHECK(cudaEventDestroy(e));
    p.block->used_by.clear();
    bins_[p.block->stream].emplace(p.block->size, p.block);
    pending_[i] = pending_.back();
    pending_.pop_back();
  }
}

CachingAllocator::Block* CachingAllocator::take_cached_locked(size_t size, cudaStream_t stream) {
  auto bin = bins_.find(stream);
  if (bin == bins_.end()) return nullptr;
  auto it = bin->second.lower_bound(size);
  // Do not hand a huge block to a small request: it would pin the memory.
  if (it == bin->second.end() || (size < kSmall) != (it->first < kSmall) || it->first > 2 * size + kLargeGranule)
    return nullptr;
  Block* b = it->second;
  bin->second.erase(it);
  return b;
}

std::shared_ptr<Storage> CachingAllocator::allocate_on(size_t bytes, cudaStream_t stream) {
  size_t size = round_size(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  collect_pending_locked();
  Block* b = take_cached_locked(size, stream);
  if (b) {
    ++st_.cache_hits;
  } else {
    void* ptr = nullptr;
    cudaError_t e = cudaMalloc(&ptr, size);
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear the sticky-free error state
      // Give cached blocks back and try once more.
      CUDA_CHECK(cudaDeviceSynchronize());
      free_cached_locked();
      e = cudaMalloc(&ptr, size);
    }
    if (e != cudaSuccess) {
      cudaGetLastError();
      throw RuntimeFailure(cat("out of GPU memory on cuda:", device_, " allocating ", bytes,
                               " bytes (", st_.in_use, " bytes in use by tensors, ", st_.reserved,
                               " reserved): reduce the batch size or the number of in-flight minibatches"));
    }
    b = new Block{ptr, size, stream, {}};
    ++st_.cuda_mallocs;
    st_.reserved += size;
    st_.peak_reserved = std::max(st_.peak_reserved, st_.reserved);
  }
  b->stream = stream;
  st_.in_use += b->size;
  st_.peak_in_use = std::max(st_.peak_in_use, st_.in_use);
  live_[b->ptr] = b;
  auto s = std::make_shared<CudaStorage>();
  s->owner = this;
  s->block = b;
  s->data = b->ptr;
  s->bytes = bytes;
  s->device = Device::cuda(device_);
  return s;
}

void CachingAllocator::free_block(Block* b) {
  std::lock_guard<std::mutex> lock(mu_);
  live_.erase(b->ptr);
  st_.in_use -= b->size;
  if (b->used_by.empty()) {
    bins_[b->stream].emplace(b->size, b);
    return;
  }
  Pending p{b, {}};
  for (cudaStream_t s : b->used_by) {
    cudaEvent_t e;
    // A destructor path: report failures without throwing.
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) continue;
    if (cudaEventRecord(e, s) != cudaSuccess) {
      cudaEventDestroy(e);
      continue;
    }
    p.events.push_back(e);
  }
  pending_.push_back(std::move(p));
}

void CachingAllocator::record_stream(const Storage& s, cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(s.data);
  PD_CHECK(it != live_.end(), "record_stream on storage not owned by the caching allocator");
  Block* b = it->second;
  if (stream == b->stream) return;
  if (std::find(b->used_by.begin(), b->used_by.end(), stream) == b->used_by.end())
    b->used_by.push_back(stream);
}

void CachingAllocator::release_cached() {
  CUDA_CHECK(cudaDeviceSynchronize());
  std::lock_guard<std::mutex> lock(mu_);
  free_cached_locked();
}

// Returns every cached block to the driver (the caller holds mu_ and has
// synchronised the device, so no stream still uses them).
void CachingAllocator::free_cached_locked() {
  collect_pending_locked();
  for (auto& [s, bin] : bins_)
    for (auto& [sz, blk] : bin) {
      CUDA_CHECK(cudaFree(blk->ptr));
      st_.reserved -= blk->size;
      delete blk;
    }
  bins_.clear();
}

size_t CachingAllocator::current_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return st_.in_use;
}

size_t CachingAllocator::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return st_.peak_in_use;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mu_);
  st_.peak_in_use = st_.in_use;
  st_.peak_reserved = st_.reserved;
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return st_;
}

PinnedBuffer::PinnedBuffer(size_t bytes) { reserve(bytes); }

PinnedBuffer::~PinnedBuffer() {
  if (ptr_) cudaFreeHost(ptr_);
}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFreeHost(ptr_);
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

void PinnedBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return;
  void* p = nullptr;
  CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
  if (ptr_) CUDA_CHECK(cudaFreeHost(ptr_));
  ptr_ = p;
  bytes_ = bytes;
}

}  // namespace pd::cuda
