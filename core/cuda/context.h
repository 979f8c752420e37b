#pragma once
// Per-process GPU state: one compute stream and one communication stream
// (a worker is one process driving one GPU), the cuBLAS and cuDNN handles
// bound to the compute stream, and event helpers for cross-stream
// dependencies and for timing.
#include <cuda_runtime.h>
#include <cublas_v2.h>

#if defined(PIPEDREAM_HAVE_CUDNN)
#include <cudnn.h>
#endif

#include "core/precision.h"

namespace pd::cuda {

struct Context {
  int device = 0;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;
  cublasHandle_t cublas = nullptr;
#if defined(PIPEDREAM_HAVE_CUDNN)
  cudnnHandle_t cudnn = nullptr;
#endif
  bool deterministic = false;
  bool allow_tf32 = false;
};

// Tensor-core math for FP32-stored operands: with --allow-tf32, and for a
// call under --precision bf16 (its StepInfo::precision), where every
// GEMM/convolution operand is a bf16 value and TF32's 10-bit mantissa holds
// it exactly (products unchanged).
inline bool tensor_math(const Context& c, Precision p) { return c.allow_tf32 || p == Precision::BF16; }

// The initialised context; throws if initialize_backend() was not called.
Context& context();
inline cudaStream_t compute_stream() { return context().compute; }
inline cudaStream_t comm_stream() { return context().comm; }

// An owned CUDA event (timing enabled unless told otherwise).
class Event {
 public:
  explicit Event(bool timing = true);
  ~Event();
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  Event(Event&& o) noexcept : ev_(o.ev_) { o.ev_ = nullptr; }
  void record(cudaStream_t s);
  void synchronize() const;
  bool done() const;  // non-blocking
  // Milliseconds from `start` to this event; waits for this event.
  float elapsed_ms_since(const Event& start) const;
  cudaEvent_t get() const { return ev_; }

 private:
  cudaEvent_t ev_ = nullptr;
};

// Makes `waiter` wait for everything queued on `producer` so far (e.g. the
// comm stream waits for the backward that produced a gradient).
void stream_wait(cudaStream_t waiter, cudaStream_t producer);

}  // namespace pd::cuda
