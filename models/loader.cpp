#include "models/loader.h"

#include <algorithm>
#include <cstring>
#include <system_error>

#include "core/device_ops.h"
#include "core/error.h"

namespace pd {

namespace {

// A thread that could not start: usually memory (each takes a stack), as
// under an address-space limit.
RuntimeFailure thread_start_failure(const char* pool, size_t started, int threads, const std::system_error& e) {
  return RuntimeFailure(cat("cannot start ", pool, " thread ", started + 1, " of ", threads, " (", e.what(),
                            "): out of memory or of threads; raise the limit (ulimit -v, -u) or ask for fewer threads"));
}

}  // namespace

BatchLoader::BatchLoader(Produce produce, int64_t first, int64_t end, int threads, int depth)
    : produce_(std::move(produce)), next_take_(first), next_claim_(first), end_(end),
      depth_(depth > 0 ? depth : 2 * std::max(threads, 1)) {
  PD_CHECK(threads >= 0 && first <= end, "bad loader range or thread count");
  try {
    for (int t = 0; t < threads && t < end - first; ++t) workers_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {
    // No destructor runs for a constructor that throws: the threads started
    // must be joined here, or their std::thread objects would abort.
    stop();
    throw thread_start_failure("loader", workers_.size(), threads, e);
  }
}

BatchLoader::~BatchLoader() { stop(); }

void BatchLoader::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  space_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void BatchLoader::work() {
  for (;;) {
    int64_t item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      space_cv_.wait(lock, [&] { return stop_ || next_claim_ >= end_ || next_claim_ < next_take_ + depth_; });
      if (stop_ || next_claim_ >= end_) return;
      item = next_claim_++;
    }
    Slot slot;
    try {
      slot.batch = produce_(item);
    } catch (...) {
      slot.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      ready_[item] = std::move(slot);
    }
    ready_cv_.notify_all();
  }
}

Batch BatchLoader::next() {
  PD_CHECK(next_take_ < end_, "the loader has handed out all its items");
  if (workers_.empty()) return produce_(next_take_++);
  std::unique_lock<std::mutex> lock(mu_);
  ready_cv_.wait(lock, [&] { return ready_.count(next_take_) > 0; });
  auto node = ready_.extract(next_take_++);
  lock.unlock();
  space_cv_.notify_all();
  if (node.mapped().error) std::rethrow_exception(node.mapped().error);
  return std::move(node.mapped().batch);
}

PrefetchPool::PrefetchPool(int threads) {
  try {
    for (int t = 0; t < threads; ++t) workers_.emplace_back([this] { work(); });
  } catch (const std::system_error& e) {
    stop();
    throw thread_start_failure("prefetch", workers_.size(), threads, e);
  }
}

PrefetchPool::~PrefetchPool() { stop(); }

void PrefetchPool::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    tasks_.clear();
  }
  task_cv_.notify_all();
  for (std::thread& t : workers_) t.join();
  workers_.clear();
}

void PrefetchPool::submit(int64_t key, std::function<Tensor()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    PD_CHECK(slots_.emplace(key, Slot{}).second, "item ", key, " is prefetched already");
    tasks_.emplace_back(key, std::move(task));
  }
  task_cv_.notify_one();
}

bool PrefetchPool::submitted(int64_t key) {
  std::lock_guard<std::mutex> lock(mu_);
  return slots_.count(key) > 0;
}

void PrefetchPool::work() {
  for (;;) {
    std::pair<int64_t, std::function<Tensor()>> task;
    {
      std::unique_lock<std::mutex> lock(mu_);
      task_cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    Slot done;
    done.done = true;
    try {
      done.result = task.second();
    } catch (...) {
      done.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      slots_[task.first] = std::move(done);
    }
    done_cv_.notify_all();
  }
}

Tensor PrefetchPool::take(int64_t key) {
  std::unique_lock<std::mutex> lock(mu_);
  PD_CHECK(slots_.count(key) > 0, "item ", key, " was never prefetched");
  done_cv_.wait(lock, [&] { return slots_.at(key).done; });
  auto node = slots_.extract(key);
  lock.unlock();
  if (node.mapped().error) std::rethrow_exception(node.mapped().error);
  return std::move(node.mapped().result);
}

int default_loader_threads(int compute_threads) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  return std::clamp(cores - compute_threads, 1, 8);
}

InputStager::~InputStager() {
  if (device_.is_cpu()) return;
  try {
    const DeviceOps& ops = device_ops(device_);
    if (!ops.upload_async) return;
    // A staged copy nobody took still writes its device block: order the
    // block's next user after it before the tensor goes back to the allocator.
    if (staged_copy_) ops.upload_wait_on_compute(staged_copy_);
    for (Pinned& s : slots_) {
      if (s.copy) ops.upload_release(s.copy);
      ops.pinned_free(s.data);
    }
  } catch (...) {
    // A failed GPU is reported by the training that used it.
  }
}

void InputStager::stage(Batch b) {
  PD_CHECK(!staged_, "InputStager holds a batch already; take() it first");
  staged_ = true;
  // A backend without the upload entries gets host inputs, which the first
  // layer copies to the device as it would without a stager.
  if (device_.is_cpu() || b.inputs.device() == device_ || !device_ops(device_).upload_async) {
    batch_ = std::move(b);
    return;
  }
  const DeviceOps& ops = device_ops(device_);
  Pinned& slot = slots_[next_slot_];
  next_slot_ ^= 1;
  if (slot.copy) {
    ops.upload_release(slot.copy);  // the copy two batches back still read this buffer
    slot.copy = 0;
  }
  const size_t n = b.inputs.nbytes();
  if (slot.bytes < n) {
    ops.pinned_free(slot.data);
    slot.data = nullptr;
    slot.bytes = 0;
    slot.data = ops.pinned_alloc(n);
    slot.bytes = n;
  }
  std::memcpy(slot.data, b.inputs.raw(), n);
  Tensor on_device = Tensor::empty(b.inputs.shape(), b.inputs.dtype(), device_);
  slot.copy = ops.upload_async(on_device.raw(), slot.data, n);
  staged_copy_ = slot.copy;
  batch_ = {std::move(on_device), std::move(b.labels)};
}

Batch InputStager::take() {
  PD_CHECK(staged_, "InputStager::take() with nothing staged");
  staged_ = false;
  if (staged_copy_) {
    device_ops(device_).upload_wait_on_compute(staged_copy_);
    staged_copy_ = 0;
  }
  return std::move(batch_);
}

}  // namespace pd
