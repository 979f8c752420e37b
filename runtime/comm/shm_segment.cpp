// The per-host shared-memory segment: creation, mapping, unlinking, and
// the futex doorbells.

// C API only: Open MPI's mpi.h would otherwise drag in the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include "runtime/comm/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "core/text.h"
#include "runtime/comm/mpi_check.h"

namespace pd {
namespace {

// head, tail, reader_wants (with reader_seq) and writer_wants, each on its
// own cache line
constexpr uint64_t kRingControlBytes = 256;
constexpr const char* kShmDir = "/dev/shm";

struct Announcement {
  int32_t ok = 0;
  uint64_t ring_bytes = 0;
  char name[64] = {};
  char why[400] = {};
};

std::string unique_name() {
  std::random_device rd;
  char buf[64];
  snprintf(buf, sizeof buf, "/pipedream-%d-%08x", static_cast<int>(getpid()), rd());
  return buf;
}

// Creates, sizes (really reserving the pages, so a full /dev/shm is an
// error here rather than a SIGBUS later) and maps the segment.
std::string create_on_first_rank(int n, uint64_t wanted, bool may_shrink, Announcement& a, char*& base) {
  struct statvfs fs {};
  if (statvfs(kShmDir, &fs) != 0)
    return cat("cannot inspect ", kShmDir, ": ", strerror(errno));
  const uint64_t free_bytes = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  uint64_t ring = wanted;
  // Take at most half of what is free, shrinking the rings (not below 64 KiB).
  while (may_shrink && ShmSegment::size_for(n, ring) > free_bytes / 2 && ring > (64u << 10)) ring /= 2;
  const uint64_t total = ShmSegment::size_for(n, ring);
  if (total > free_bytes)
    return cat(kShmDir, " has ", bytes_text(static_cast<double>(free_bytes)), " free; ", n,
               " ranks on this host need ", bytes_text(static_cast<double>(total)),
               " (enlarge it, e.g. docker --shm-size, or set PIPEDREAM_SHM_RING_BYTES lower)");
  const std::string name = unique_name();
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) return cat("cannot create ", kShmDir, name, ": ", strerror(errno));
  const int rc = posix_fallocate(fd, 0, static_cast<off_t>(total));
  if (rc != 0) {
    close(fd);
    shm_unlink(name.c_str());
    return cat("cannot reserve ", bytes_text(static_cast<double>(total)), " in ", kShmDir, ": ", strerror(rc));
  }
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    shm_unlink(name.c_str());
    return cat("cannot map ", kShmDir, name, ": ", strerror(errno));
  }
  base = static_cast<char*>(p);
  a.ring_bytes = ring;
  snprintf(a.name, sizeof a.name, "%s", name.c_str());
  return "";
}

std::string map_existing(const Announcement& a, uint64_t total, char*& base) {
  const int fd = shm_open(a.name, O_RDWR, 0600);
  if (fd < 0) return cat("cannot open ", kShmDir, a.name, ": ", strerror(errno));
  void* p = mmap(nullptr, total, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return cat("cannot map ", kShmDir, a.name, ": ", strerror(errno));
  base = static_cast<char*>(p);
  return "";
}

}  // namespace

uint64_t ShmSegment::size_for(int n, uint64_t ring_bytes) {
  const uint64_t pairs = static_cast<uint64_t>(n) * static_cast<uint64_t>(n);
  return static_cast<uint64_t>(n) * sizeof(ShmDoorbell) + pairs * (kRingControlBytes + ring_bytes);
}

ShmSegment ShmSegment::create(MPI_Comm node, uint64_t ring_bytes_wanted, bool may_shrink) {
  int me = 0, n = 1;
  PD_MPI_CHECK(MPI_Comm_rank(node, &me));
  PD_MPI_CHECK(MPI_Comm_size(node, &n));
  ring_bytes_wanted = std::max<uint64_t>(kShmMinRingBytes, ring_bytes_wanted / 64 * 64);
  Announcement a;
  char* base = nullptr;
  std::string why;
  if (me == 0) {
    why = create_on_first_rank(n, ring_bytes_wanted, may_shrink, a, base);
    a.ok = why.empty();
    snprintf(a.why, sizeof a.why, "%s", why.c_str());
  }
  PD_MPI_CHECK(MPI_Bcast(&a, sizeof a, MPI_BYTE, 0, node));
  const uint64_t total = size_for(n, a.ring_bytes);
  if (me != 0) {
    why = a.ok ? map_existing(a, total, base) : a.why;
  }
  int mapped = base != nullptr, all_mapped = 0;
  PD_MPI_CHECK(MPI_Allreduce(&mapped, &all_mapped, 1, MPI_INT, MPI_MIN, node));
  // Every rank has mapped it (or given up): the name is no longer needed.
  if (me == 0 && a.ok) shm_unlink(a.name);
  ShmSegment s;
  if (!all_mapped) {
    if (base) munmap(base, total);
    s.why_ = why.empty() ? "another rank of this host could not map the segment" : why;
    return s;
  }
  s.base_ = base;
  s.total_ = total;
  s.ring_bytes_ = a.ring_bytes;
  s.n_ = n;
  return s;
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this == &o) return *this;
  if (base_) munmap(base_, total_);
  base_ = o.base_;
  total_ = o.total_;
  ring_bytes_ = o.ring_bytes_;
  n_ = o.n_;
  why_ = std::move(o.why_);
  o.base_ = nullptr;
  return *this;
}

ShmSegment::~ShmSegment() {
  if (base_) munmap(base_, total_);
}

ShmDoorbell& ShmSegment::doorbell(int local_rank) const {
  return reinterpret_cast<ShmDoorbell*>(base_)[local_rank];
}

ShmRing ShmSegment::ring(int src, int dst) const {
  char* p = base_ + static_cast<uint64_t>(n_) * sizeof(ShmDoorbell) +
            (static_cast<uint64_t>(src) * n_ + dst) * (kRingControlBytes + ring_bytes_);
  return {reinterpret_cast<std::atomic<uint64_t>*>(p), reinterpret_cast<std::atomic<uint64_t>*>(p + 64),
          reinterpret_cast<std::atomic<uint32_t>*>(p + 128), reinterpret_cast<std::atomic<uint32_t>*>(p + 136),
          reinterpret_cast<std::atomic<uint32_t>*>(p + 192),
          p + kRingControlBytes, ring_bytes_};
}

namespace {
long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  // Not FUTEX_PRIVATE: the word is shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}
}  // namespace

void ShmSegment::ring_doorbell(int local_rank) const {
  ShmDoorbell& d = doorbell(local_rank);
  d.seq.fetch_add(1, std::memory_order_seq_cst);
  if (d.sleeping.load(std::memory_order_seq_cst)) futex(&d.seq, FUTEX_WAKE, 1, nullptr);
}

void ShmSegment::wake_all(std::atomic<uint32_t>* word) { futex(word, FUTEX_WAKE, INT32_MAX, nullptr); }

void ShmSegment::wait_word(std::atomic<uint32_t>* word, uint32_t seen, int64_t timeout_us) {
  timespec ts{static_cast<time_t>(timeout_us / 1000000), static_cast<long>(timeout_us % 1000000) * 1000};
  futex(word, FUTEX_WAIT, seen, &ts);
}

void ShmSegment::wait_doorbell(int local_rank, uint32_t seen, int64_t timeout_us) const {
  wait_word(&doorbell(local_rank).seq, seen, timeout_us);
}

}  // namespace pd
