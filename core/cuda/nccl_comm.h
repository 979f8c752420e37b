#pragma once
// NCCL communicator for the GPU transport (docs/design.md §8). Bootstrap is the
// caller's: rank 0 calls make_unique_id(), the runtime broadcasts the bytes
// (over MPI), every rank constructs NcclCommunicator with them. MPI stays
// out of pd_core_cuda. Each communicator has its own stream: operations are
// queued there after everything already queued on the compute stream (so a
// sent activation is complete); consumers of received data call
// compute_waits_for_comm() (or poll an event recorded after it) before
// using it. One stream per communicator matters for point to point: NCCL
// send/recv block their stream until the peer's matching call runs, so two
// ranks exchanging in both directions on one shared stream can deadlock;
// the transport gives each direction of a link its own communicator.
//
// Plain C++ header (no nccl.h): runtime/comm can include it without NCCL.
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace pd::cuda {

enum class NcclType : uint8_t { F32, I32, I64, Bytes };
enum class NcclReduce : uint8_t { Sum, Average };

// True when pd_core_cuda was built with NCCL.
bool nccl_available();

class NcclCommunicator {
 public:
  static constexpr size_t kIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
  using UniqueId = std::array<char, kIdBytes>;

  // Rank 0 of a (sub)job creates the id and shares it with the others.
  static UniqueId make_unique_id();

  // Collective over `nranks` processes: returns once all have joined.
  NcclCommunicator(const UniqueId& id, int nranks, int rank);
  ~NcclCommunicator();  // destroys (or, after abort(), frees what is left)
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Point to point on the communication stream. Calls between group_start()
  // and group_end() are issued together (needed for a send and a receive
  // with the same peer, which would otherwise deadlock).
  void send(const void* buf, size_t count, NcclType type, int peer);
  void recv(void* buf, size_t count, NcclType type, int peer);
  static void group_start();
  static void group_end();

  // In place over this communicator.
  void all_reduce(void* buf, size_t count, NcclType type, NcclReduce op);

  // Sub-communicator (a stage's replicas): every rank calls with its color;
  // ranks sharing a color form one communicator, ordered by key. color < 0:
  // this rank joins none and gets nullptr.
  std::unique_ptr<NcclCommunicator> split(int color, int key);

  // This communicator's stream (a cudaStream_t), for events.
  void* stream_handle() const { return stream_; }

  // Makes the compute stream wait for the communication queued so far.
  void compute_waits_for_comm() const;
  // Blocks until queued communication has finished. Throws RuntimeFailure
  // on an NCCL asynchronous error (a peer died) or after timeout_s seconds
  // (then the caller aborts). timeout_s <= 0 waits without limit.
  void wait(double timeout_s) const;
  // Throws RuntimeFailure if NCCL reported an asynchronous error.
  void check_async_error() const;
  // Tears the communicator down without waiting for peers (fault path):
  // pending operations are cancelled. Idempotent.
  void abort();

 private:
  NcclCommunicator() = default;
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t, owned
  int rank_ = 0, size_ = 0;
  bool aborted_ = false;
};

}  // namespace pd::cuda
