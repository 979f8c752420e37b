#include "core/cuda/nccl_comm.h"

#include <chrono>
#include <cstring>
#include <thread>

#include "core/cuda/check.h"
#include "core/cuda/context.h"

namespace pd::cuda {

#if defined(PIPEDREAM_HAVE_NCCL)

namespace {

ncclComm_t as_comm(void* p) { return static_cast<ncclComm_t>(p); }
cudaStream_t as_stream(void* p) { return static_cast<cudaStream_t>(p); }

void* new_stream() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

ncclDataType_t to_nccl(NcclType t) {
  switch (t) {
    case NcclType::F32: return ncclFloat32;
    case NcclType::I32: return ncclInt32;
    case NcclType::I64: return ncclInt64;
    case NcclType::Bytes: return ncclUint8;
  }
  return ncclFloat32;
}

}  // namespace

bool nccl_available() { return true; }

NcclCommunicator::UniqueId NcclCommunicator::make_unique_id() {
  static_assert(sizeof(ncclUniqueId) == kIdBytes, "NCCL unique id size changed");
  ncclUniqueId id;
  NCCL_CHECK(ncclGetUniqueId(&id));
  UniqueId out;
  std::memcpy(out.data(), &id, kIdBytes);
  return out;
}

NcclCommunicator::NcclCommunicator(const UniqueId& id, int nranks, int rank) : rank_(rank), size_(nranks) {
  PD_CHECK(nranks >= 1 && rank >= 0 && rank < nranks, "bad NCCL rank ", rank, " of ", nranks);
  context();  // binds this thread to the backend's GPU
  ncclUniqueId nid;
  std::memcpy(&nid, id.data(), kIdBytes);
  ncclComm_t c = nullptr;
  NCCL_CHECK(ncclCommInitRank(&c, nranks, nid, rank));
  comm_ = c;
  stream_ = new_stream();
}

NcclCommunicator::~NcclCommunicator() {
  // A destructor must not throw; failures here are reported by the caller's
  // earlier wait()/check_async_error().
  if (comm_ && !aborted_) ncclCommDestroy(as_comm(comm_));
  if (stream_) cudaStreamDestroy(as_stream(stream_));
}

void NcclCommunicator::send(const void* buf, size_t count, NcclType type, int peer) {
  Context& c = context();
  stream_wait(as_stream(stream_), c.compute);
  NCCL_CHECK(ncclSend(buf, count, to_nccl(type), peer, as_comm(comm_), as_stream(stream_)));
}

void NcclCommunicator::recv(void* buf, size_t count, NcclType type, int peer) {
  Context& c = context();
  // The buffer may have been freed and reallocated by compute work: order after it.
  stream_wait(as_stream(stream_), c.compute);
  NCCL_CHECK(ncclRecv(buf, count, to_nccl(type), peer, as_comm(comm_), as_stream(stream_)));
}

void NcclCommunicator::group_start() { NCCL_CHECK(ncclGroupStart()); }
void NcclCommunicator::group_end() { NCCL_CHECK(ncclGroupEnd()); }

void NcclCommunicator::all_reduce(void* buf, size_t count, NcclType type, NcclReduce op) {
  Context& c = context();
  stream_wait(as_stream(stream_), c.compute);
  NCCL_CHECK(ncclAllReduce(buf, buf, count, to_nccl(type), op == NcclReduce::Sum ? ncclSum : ncclAvg,
                           as_comm(comm_), as_stream(stream_)));
}

std::unique_ptr<NcclCommunicator> NcclCommunicator::split(int color, int key) {
  ncclComm_t sub = nullptr;
  NCCL_CHECK(ncclCommSplit(as_comm(comm_), color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr));
  if (!sub) return nullptr;
  std::unique_ptr<NcclCommunicator> out(new NcclCommunicator());
  out->comm_ = sub;
  out->stream_ = new_stream();
  NCCL_CHECK(ncclCommUserRank(sub, &out->rank_));
  NCCL_CHECK(ncclCommCount(sub, &out->size_));
  return out;
}

void NcclCommunicator::compute_waits_for_comm() const {
  Context& c = context();
  stream_wait(c.compute, as_stream(stream_));
}

void NcclCommunicator::check_async_error() const {
  if (!comm_ || aborted_) return;
  ncclResult_t async = ncclSuccess;
  NCCL_CHECK(ncclCommGetAsyncError(as_comm(comm_), &async));
  if (async != ncclSuccess && async != ncclInProgress)
    throw RuntimeFailure(cat("NCCL communication failed (rank ", rank_, " of ", size_,
                             "): ", ncclGetErrorString(async), " - a peer may have died"));
}

void NcclCommunicator::wait(double timeout_s) const {
  context();  // binds this thread to the GPU
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    cudaError_t e = cudaStreamQuery(as_stream(stream_));
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) CUDA_CHECK(e);
    check_async_error();
    double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (timeout_s > 0 && waited > timeout_s)
      throw RuntimeFailure(cat("NCCL communication did not finish within ", timeout_s, " s (rank ", rank_, " of ",
                               size_, ")"));
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void NcclCommunicator::abort() {
  if (!comm_ || aborted_) return;
  aborted_ = true;
  ncclCommAbort(as_comm(comm_));  // frees the communicator; errors are moot on this path
}

#else  // built without NCCL

namespace {
[[noreturn]] void no_nccl() {
  throw UserError("this pipedream was built without NCCL: use the host-staged MPI transport");
}
}  // namespace

bool nccl_available() { return false; }
NcclCommunicator::UniqueId NcclCommunicator::make_unique_id() { no_nccl(); }
NcclCommunicator::NcclCommunicator(const UniqueId&, int, int) { no_nccl(); }
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::send(const void*, size_t, NcclType, int) { no_nccl(); }
void NcclCommunicator::recv(void*, size_t, NcclType, int) { no_nccl(); }
void NcclCommunicator::group_start() { no_nccl(); }
void NcclCommunicator::group_end() { no_nccl(); }
void NcclCommunicator::all_reduce(void*, size_t, NcclType, NcclReduce) { no_nccl(); }
std::unique_ptr<NcclCommunicator> NcclCommunicator::split(int, int) { no_nccl(); }
void NcclCommunicator::compute_waits_for_comm() const { no_nccl(); }
void NcclCommunicator::wait(double) const { no_nccl(); }
void NcclCommunicator::check_async_error() const {}
void NcclCommunicator::abort() {}

#endif

}  // namespace pd::cuda
