// The NCCL entries of the plugin table (core/cuda_plugin.h): NcclCommunicator
// behind opaque handles, plus completion events on a communicator's stream,
// for runtime/comm/nccl_transport.cpp, which does not link CUDA or NCCL.
#include <cstdio>
#include <cstring>

#include "core/cuda/check.h"
#include "core/cuda/context.h"
#include "core/cuda/nccl_comm.h"
#include "core/cuda_plugin.h"

namespace pd::cuda {

namespace {

NcclCommunicator& as_comm(void* c) {
  PD_CHECK(c != nullptr, "null NCCL communicator handle");
  return *static_cast<NcclCommunicator*>(c);
}

void make_id(char* out) {
  const NcclCommunicator::UniqueId id = NcclCommunicator::make_unique_id();
  std::memcpy(out, id.data(), NcclCommunicator::kIdBytes);
}

void* create(const char* id, int nranks, int rank) {
  NcclCommunicator::UniqueId u;
  std::memcpy(u.data(), id, NcclCommunicator::kIdBytes);
  return new NcclCommunicator(u, nranks, rank);
}

void destroy(void* c) { delete static_cast<NcclCommunicator*>(c); }

void send(void* c, const void* buf, size_t bytes, int peer) { as_comm(c).send(buf, bytes, NcclType::Bytes, peer); }
void recv(void* c, void* buf, size_t bytes, int peer) { as_comm(c).recv(buf, bytes, NcclType::Bytes, peer); }

void all_reduce_f32(void* c, float* buf, size_t count, bool average) {
  as_comm(c).all_reduce(buf, count, NcclType::F32, average ? NcclReduce::Average : NcclReduce::Sum);
}

void* record_event(void* c) {
  context();  // binds this thread to the GPU
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  CUDA_CHECK(cudaEventRecord(e, static_cast<cudaStream_t>(as_comm(c).stream_handle())));
  return e;
}

bool event_done(void* c, void* event) {
  cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
  if (e == cudaSuccess) return true;
  if (e != cudaErrorNotReady) CUDA_CHECK(e);
  as_comm(c).check_async_error();
  return false;
}

void event_release(void* event) {
  if (event) cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void abort_comm(void* c) {
  if (c) as_comm(c).abort();
}

void device_uuid(char* out, size_t len) {
  const int device = context().device;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  std::string s = "GPU-";
  for (int i = 0; i < 16; ++i) {
    char h[3];
    std::snprintf(h, sizeof h, "%02x", static_cast<unsigned char>(prop.uuid.bytes[i]));
    s += h;
  }
  std::snprintf(out, len, "%s", s.c_str());
}

const CudaNcclApi kNcclApi = {
    &nccl_available, &make_id,        &create,       &destroy,     &send,       &recv,
    &all_reduce_f32, &record_event,   &event_done,   &event_release, &abort_comm, &device_uuid,
};

}  // namespace

const CudaNcclApi* nccl_plugin_api() { return &kNcclApi; }

}  // namespace pd::cuda
