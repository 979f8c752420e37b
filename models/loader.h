#pragma once
// The data path of a training loop: minibatches computed ahead by loader
// threads, and on a GPU copied to the device ahead of the step that uses
// them.
//
// What is trained does not change: the loader only moves work earlier. A
// batch is produce(item), a pure function of the item (trainer: the global
// step, whose minibatch is a function of (seed, epoch, index)); next()
// hands them out in item order whatever thread computed them, so a run
// with 0 loader threads and one with 8 train on the same bits.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "models/dataset.h"

namespace pd {

class BatchLoader {
 public:
  using Produce = std::function<Batch(int64_t item)>;
  // Items [first, end). threads 0: next() produces each item itself, on the
  // calling thread. Otherwise `threads` threads work at most `depth` items
  // ahead of the last one taken (depth 0: 2 per thread).
  BatchLoader(Produce produce, int64_t first, int64_t end, int threads, int depth = 0);
  ~BatchLoader();  // stops the threads after the items they are on
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // The next item's batch, waiting for it if need be; rethrows what
  // produce threw for that item.
  Batch next();
  int threads() const { return static_cast<int>(workers_.size()); }

 private:
  struct Slot {
    Batch batch;
    std::exception_ptr error;
  };
  void work();
  void stop();  // stops and joins the threads

  Produce produce_;
  int64_t next_take_, next_claim_, end_;
  int depth_;
  std::mutex mu_;
  std::condition_variable ready_cv_, space_cv_;
  std::map<int64_t, Slot> ready_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// Tasks keyed by an item, run by `threads` threads in the order they were
// submitted; take(key) waits for that item's result. A pipeline's first
// stage submits the inputs of the forwards in its look-ahead window.
class PrefetchPool {
 public:
  explicit PrefetchPool(int threads);
  ~PrefetchPool();  // drops the tasks not started, joins the threads
  PrefetchPool(const PrefetchPool&) = delete;
  PrefetchPool& operator=(const PrefetchPool&) = delete;

  void submit(int64_t key, std::function<Tensor()> task);
  bool submitted(int64_t key);
  // The task's result (rethrows what it threw); the key may be submitted again after.
  Tensor take(int64_t key);

 private:
  struct Slot {
    Tensor result;
    std::exception_ptr error;
    bool done = false;
  };
  void work();
  void stop();  // drops the tasks not started, joins the threads
  std::mutex mu_;
  std::condition_variable task_cv_, done_cv_;
  std::deque<std::pair<int64_t, std::function<Tensor()>>> tasks_;
  std::map<int64_t, Slot> slots_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

// --loader-threads when not given: the cores the compute threads leave
// (at least 1, at most 8).
int default_loader_threads(int compute_threads);

// On a GPU: a batch's inputs copied to the device from pinned host memory
// on a copy stream of their own (DeviceOps::upload_async), so the next
// minibatch travels while this one trains. Labels stay on the host (the
// loss checks their range there). On the CPU it hands batches through.
class InputStager {
 public:
  explicit InputStager(Device device) : device_(device) {}
  ~InputStager();
  InputStager(const InputStager&) = delete;
  InputStager& operator=(const InputStager&) = delete;

  // Starts the copy of b's inputs; queue at most one batch before take().
  void stage(Batch b);
  // The staged batch; compute work queued after this waits for its copy.
  Batch take();

 private:
  struct Pinned {
    void* data = nullptr;
    size_t bytes = 0;
    uint64_t copy = 0;  // the copy that reads it, 0 when none is in flight
  };
  Device device_;
  Pinned slots_[2];
  int next_slot_ = 0;
  bool staged_ = false;
  Batch batch_;
  uint64_t staged_copy_ = 0;
};

}  // namespace pd
