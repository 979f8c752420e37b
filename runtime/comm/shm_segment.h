#pragma once
// The shared-memory segment the ranks of one host exchange messages through
// (shm_engine.h): one POSIX shared-memory object per host, created by the
// host's first rank, mapped by all of them, unlinked as soon as every rank
// has mapped it (so nothing is left in /dev/shm, even if a rank is killed
// later). Internal to runtime/comm/.
//
// Layout: a doorbell per rank (a futex word its progress thread sleeps on),
// then one single-producer single-consumer byte ring per ordered pair of
// ranks (src, dst). Heads and tails are byte counts that only grow.
//
// Include after <mpi.h> (with OMPI_SKIP_MPICXX defined).
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace pd {

struct alignas(64) ShmDoorbell {
  std::atomic<uint32_t> seq;       // bumped by whoever has news for this rank
  std::atomic<uint32_t> sleeping;  // 1 while its thread waits on seq
  std::atomic<int32_t> worker_tid;  // the rank's compute thread, for core_handoff.h
};

// Each side says whether it wants to hear of the other's progress, so a
// doorbell is rung only for a thread with something to do: a needless
// wake-up on busy cores preempts a compute thread for microseconds and
// leaves it queued, cache-hot, behind another while a core idles
// (docs/measurements.md, "Doorbells").
struct ShmRing {
  std::atomic<uint64_t>* head;  // bytes written by src
  std::atomic<uint64_t>* tail;  // bytes consumed by dst
  // Bit 0: dst's progress thread has a receive from src that new bytes may
  // serve; above it, twice the number of dst's threads sleeping on
  // reader_seq for a receive from src (they are woken instead, and take
  // the message themselves).
  std::atomic<uint32_t>* reader_wants;
  std::atomic<uint32_t>* reader_seq;
  std::atomic<uint32_t>* writer_wants;  // src has sends to dst queued for room
  char* data;
  uint64_t bytes;  // capacity, a multiple of 64
};

class ShmSegment {
 public:
  // Collective over `node` (the ranks of this host). Returns an unmapped
  // segment (ok() false, why() says why) when shared memory is unusable on
  // any rank of the host: then every rank of the host knows it. With
  // `may_shrink`, rings shrink (to 64 KiB at least) to take at most half
  // of what /dev/shm has free; otherwise the size is taken as given.
  static ShmSegment create(MPI_Comm node, uint64_t ring_bytes_wanted, bool may_shrink);
  ShmSegment() = default;
  ShmSegment(ShmSegment&& o) noexcept { *this = std::move(o); }
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ~ShmSegment();

  bool ok() const { return base_ != nullptr; }
  const std::string& why() const { return why_; }
  int ranks() const { return n_; }
  uint64_t ring_bytes() const { return ring_bytes_; }
  uint64_t total_bytes() const { return total_; }

  ShmRing ring(int src, int dst) const;
  ShmDoorbell& doorbell(int local_rank) const;

  // Tells local_rank's thread there is news (data, space or a command).
  void ring_doorbell(int local_rank) const;
  // Sleeps until the doorbell moves past `seen` or `timeout_us` passes.
  void wait_doorbell(int local_rank, uint32_t seen, int64_t timeout_us) const;

  // A futex on any word of the segment (not private: processes share it).
  static void wake_all(std::atomic<uint32_t>* word);
  static void wait_word(std::atomic<uint32_t>* word, uint32_t seen, int64_t timeout_us);
  // The bytes a segment for n ranks with rings of ring_bytes takes.
  static uint64_t size_for(int n, uint64_t ring_bytes);

 private:
  char* base_ = nullptr;
  uint64_t total_ = 0, ring_bytes_ = 0;
  int n_ = 0;
  std::string why_;
};

// Default ring capacity per ordered pair of ranks (PIPEDREAM_SHM_RING_BYTES
// overrides it), and the smallest the engine accepts.
constexpr uint64_t kShmDefaultRingBytes = 1u << 20;
constexpr uint64_t kShmMinRingBytes = 4096;

}  // namespace pd
