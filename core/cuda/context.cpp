#include "core/cuda/context.h"

#include "core/cuda/check.h"

namespace pd::cuda {

Event::Event(bool timing) {
  CUDA_CHECK(cudaEventCreateWithFlags(&ev_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

Event::~Event() {
  if (ev_) cudaEventDestroy(ev_);  // no throw from a destructor
}

void Event::record(cudaStream_t s) { CUDA_CHECK(cudaEventRecord(ev_, s)); }

void Event::synchronize() const { CUDA_CHECK(cudaEventSynchronize(ev_)); }

bool Event::done() const {
  cudaError_t e = cudaEventQuery(ev_);
  if (e == cudaErrorNotReady) return false;
  CUDA_CHECK(e);
  return true;
}

float Event::elapsed_ms_since(const Event& start) const {
  synchronize();
  float ms = 0;
  CUDA_CHECK(cudaEventElapsedTime(&ms, start.ev_, ev_));
  return ms;
}

void stream_wait(cudaStream_t waiter, cudaStream_t producer) {
  if (waiter == producer) return;
  cudaEvent_t ev;
  CUDA_CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(ev, producer));
  CUDA_CHECK(cudaStreamWaitEvent(waiter, ev, 0));
  // Destroying a recorded event is safe: the wait is already enqueued.
  CUDA_CHECK(cudaEventDestroy(ev));
}

}  // namespace pd::cuda
