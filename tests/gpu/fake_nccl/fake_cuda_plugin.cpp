// A stand-in for libpipedream_cuda.so, for testing the NCCL transport's
// message protocol on machines without a GPU. Its "GPU" is host memory
// (registered as the CUDA allocator, copy and fill); its "NCCL" supports
// two-rank communicators used in one direction (the transport's links):
// rank 0 sends, rank 1 receives, through a named FIFO. Each communicator has
// a worker thread that executes its queued operations in order and blocks
// on the FIFO as a CUDA stream blocks on ncclSend/ncclRecv until the peer's
// matching call runs - so a protocol that would deadlock NCCL deadlocks
// here too (and the test times out). No all-reduce, and no kernels: the
// first computation on the "GPU" fails with the CUDA backend's UserError.
// With PD_FAKE_CUDA_TRACE set, the deterministic and TF32 switches print
// "fake CUDA plugin: set_...(0|1)" to stderr, so that tests/cli can check
// that a command's flags reach the backend.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>

#include "core/cuda_plugin.h"
#include "core/error.h"
#include "core/tensor.h"

namespace {

using namespace pd;

struct FakeStorage : Storage {
  ~FakeStorage() override { std::free(data); }
};

class FakeAllocator final : public Allocator {
 public:
  std::shared_ptr<Storage> allocate(size_t bytes) override {
    auto s = std::make_shared<FakeStorage>();
    s->data = std::malloc(bytes ? bytes : 1);
    s->bytes = bytes;
    s->device = Device::cuda(0);
    current_ += bytes;
    peak_ = std::max(peak_, current_);
    return s;
  }
  size_t current_bytes() const override { return current_; }
  size_t peak_bytes() const override { return peak_; }
  void reset_peak() override { peak_ = current_; }

 private:
  size_t current_ = 0, peak_ = 0;
};

void fake_copy(void* dst, Device, const void* src, Device, size_t bytes) { std::memcpy(dst, src, bytes); }

void fake_fill(Tensor& t, float v) {
  switch (t.dtype()) {
    case DType::F32: std::fill_n(static_cast<float*>(t.raw()), t.numel(), v); break;
    case DType::I32: std::fill_n(static_cast<int32_t*>(t.raw()), t.numel(), static_cast<int32_t>(v)); break;
    case DType::I64: std::fill_n(static_cast<int64_t*>(t.raw()), t.numel(), static_cast<int64_t>(v)); break;
  }
}

void initialize(int device) {
  if (device != 0) throw UserError(cat("cuda:", device, " does not exist: 1 GPU(s) visible (fake plugin)"));
  static FakeAllocator allocator;
  register_allocator(DeviceKind::CUDA, &allocator);
  register_device_copy(&fake_copy);
  register_device_fill(&fake_fill);
}

// One communicator: a FIFO and a thread running its operations in order.
class FakeComm {
 public:
  FakeComm(const char* id, int nranks, int rank) : rank_(rank) {
    if (nranks != 2) return;  // groups: created, but all-reduce is unsupported
    char name[64];
    std::snprintf(name, sizeof name, "/tmp/pd_fake_nccl_%.32s", id);
    path_ = name;
    if (mkfifo(path_.c_str(), 0600) != 0 && errno != EEXIST)
      throw RuntimeFailure(cat("fake NCCL: mkfifo ", path_, ": ", std::strerror(errno)));
    fd_ = open(path_.c_str(), rank == 0 ? O_WRONLY : O_RDONLY);  // blocks until the peer opens: init is collective
    if (fd_ < 0) throw RuntimeFailure(cat("fake NCCL: open ", path_, ": ", std::strerror(errno)));
    if (rank == 1) unlink(path_.c_str());
    worker_ = std::thread([this] { run(); });
  }
  ~FakeComm() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (fd_ >= 0) close(fd_);
    if (worker_.joinable()) worker_.join();
  }
  void enqueue(std::function<void()> op) {
    {
      std::lock_guard lk(mu_);
      ops_.push_back(std::move(op));
    }
    cv_.notify_all();
  }
  void transfer(void* buf, size_t bytes, bool send) {
    if (fd_ < 0) throw RuntimeFailure("fake NCCL: point to point needs a two-rank communicator");
    if (send != (rank_ == 0)) throw RuntimeFailure("fake NCCL: a link sends from rank 0 to rank 1 only");
    enqueue([this, buf, bytes, send] {
      char* p = static_cast<char*>(buf);
      size_t done = 0;
      while (done < bytes) {
        ssize_t n = send ? write(fd_, p + done, bytes - done) : read(fd_, p + done, bytes - done);
        if (n <= 0) return;  // peer gone or aborted
        done += static_cast<size_t>(n);
      }
    });
  }

 private:
  void run() {
    for (;;) {
      std::function<void()> op;
      {
        std::unique_lock lk(mu_);
        cv_.wait(lk, [&] { return stop_ || !ops_.empty(); });
        if (ops_.empty()) return;
        op = std::move(ops_.front());
        ops_.pop_front();
      }
      op();
    }
  }

  int rank_;
  std::string path_;
  int fd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> ops_;
  bool stop_ = false;
  std::thread worker_;
};

FakeComm& comm(void* c) { return *static_cast<FakeComm*>(c); }

const CudaNcclApi kNccl = {
    [] { return true; },
    [](char* out) {
      std::random_device rd;
      std::memset(out, 0, 128);
      for (int i = 0; i < 32; ++i) out[i] = "0123456789abcdef"[rd() % 16];
    },
    [](const char* id, int nranks, int rank) -> void* { return new FakeComm(id, nranks, rank); },
    [](void* c) { delete static_cast<FakeComm*>(c); },
    [](void* c, const void* buf, size_t bytes, int) { comm(c).transfer(const_cast<void*>(buf), bytes, true); },
    [](void* c, void* buf, size_t bytes, int) { comm(c).transfer(buf, bytes, false); },
    [](void*, float*, size_t, bool) { throw RuntimeFailure("fake NCCL: no all-reduce"); },
    [](void* c) -> void* {
      auto* done = new std::atomic<bool>(false);
      comm(c).enqueue([done] { done->store(true); });
      return done;
    },
    [](void*, void* e) { return static_cast<std::atomic<bool>*>(e)->load(); },
    [](void* e) { delete static_cast<std::atomic<bool>*>(e); },
    [](void*) {},
    [](char* out, size_t len) {
      // One GPU per process, unless the test says otherwise.
      const char* shared = std::getenv("PD_FAKE_GPU_UUID");
      std::snprintf(out, len, "%s", shared ? shared : cat("GPU-fake-", getpid()).c_str());
    },
};

void trace_switch(const char* name, bool on) {
  if (std::getenv("PD_FAKE_CUDA_TRACE")) std::fprintf(stderr, "fake CUDA plugin: %s(%d)\n", name, on ? 1 : 0);
}

const CudaPluginApi kApi = {
    kCudaPluginAbi,
    [] { return "fake CUDA plugin (host memory, FIFO links)"; },
    [] { return 1; },
    &initialize,
    [](bool on) { trace_switch("set_deterministic", on); },
    [](bool on) { trace_switch("set_allow_tf32", on); },
    [] { return &kNccl; },
};

}  // namespace

extern "C" __attribute__((visibility("default"))) const pd::CudaPluginApi* pipedream_cuda_plugin() { return &kApi; }
