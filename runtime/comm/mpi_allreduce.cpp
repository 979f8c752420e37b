// All-reduce of the MPI transport: group tags and AllReduceOp.

// C API only: Open MPI's mpi.h would otherwise drag in the C++ bindings.
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "runtime/comm/mpi_allreduce.h"
#include "runtime/comm/mpi_engine.h"
#include "core/error.h"
#include "core/text.h"

namespace pd {
namespace {

constexpr int kSeqBits = 16;  // all-reduce tags: key | phase | sequence

// Deterministic all-reduce in two exchanges (reduce-scatter, all-gather):
// member k owns chunk k; every member sends each owner its part; the owner
// adds the n parts in rank order (reduce_in_rank_order) and sends the result
// back to everyone. Each member moves 2(n-1)/n of the data, as a ring does,
// in 2 latency steps, and the order of additions never depends on timing.
class AllReduceOp final : public MpiOp {
 public:
  AllReduceOp(MpiEngine& e, MpiGroup& g, std::vector<Tensor> tensors, ReduceOp op, int tag_base)
      : MpiOp(e, ""), ranks_(g.ranks()), me_(g.index()), op_(op), tag_base_(tag_base), tensors_(std::move(tensors)) {
    size_t total = 0;
    for (auto& t : tensors_) {
      PD_CHECK(t.dtype() == DType::F32, "all-reduce takes f32 tensors, got ", dtype_name(t.dtype()));
      PD_CHECK(t.device().is_cpu(), "the MPI transport all-reduces host tensors only");
      total += static_cast<size_t>(t.numel());
    }
    count_ = total;
    what_ = cat("all-reduce #", tag_base & ((1 << kSeqBits) - 1), " of ", bytes_text(static_cast<double>(total) * 4),
                " in group ", ranks_text(ranks_));
    if (tensors_.size() == 1) {
      buf_ = tensors_[0].f32();
    } else {
      packed_.resize(total);
      size_t off = 0;
      for (auto& t : tensors_) {
        std::memcpy(packed_.data() + off, t.f32(), t.nbytes());
        off += static_cast<size_t>(t.numel());
      }
      buf_ = packed_.data();
    }
    const size_t n = ranks_.size();
    scratch_.resize(n * chunk_len(me_));
  }

  void start() override {
    const int n = static_cast<int>(ranks_.size());
    const size_t mine = chunk_len(me_);
    for (int k = 0; k < n; ++k) {
      if (k == me_) continue;
      if (chunk_len(k) > 0) post_send(buf_ + chunk_begin(k), chunk_len(k), ranks_[k], 0);
      if (mine > 0) post_recv(scratch_.data() + k * mine, mine, ranks_[k], 0);
    }
    if (outstanding_ == 0) reduce_and_gather();
  }

  void on_request_done(int, const MPI_Status&) override {
    if (outstanding_ != 0) return;
    if (phase_ == 0)
      reduce_and_gather();
    else
      finish_op();
  }

 private:
  size_t chunk_begin(int k) const { return count_ * k / ranks_.size(); }
  size_t chunk_len(int k) const { return chunk_begin(k + 1) - chunk_begin(k); }
  int tag(int phase) const { return tag_base_ | (phase << kSeqBits); }

  void post_send(float* p, size_t len, int peer, int phase) {
    MPI_Request r;
    PD_MPI_CHECK_FOR(cat(what_, " with rank ", peer),
                     MPI_Isend(p, checked_count(len, "all-reduce chunk (floats)"), MPI_FLOAT, peer, tag(phase),
                               eng_.coll_, &r));
    track(r, peer, false);
  }
  void post_recv(float* p, size_t len, int peer, int phase) {
    MPI_Request r;
    PD_MPI_CHECK_FOR(cat(what_, " with rank ", peer),
                     MPI_Irecv(p, checked_count(len, "all-reduce chunk (floats)"), MPI_FLOAT, peer, tag(phase),
                               eng_.coll_, &r));
    track(r, peer, true);
  }

  void reduce_and_gather() {
    phase_ = 1;
    const int n = static_cast<int>(ranks_.size());
    const size_t mine = chunk_len(me_);
    float* out = buf_ + chunk_begin(me_);
    if (mine > 0) {
      std::vector<const float*> in(n);
      for (int k = 0; k < n; ++k) in[k] = k == me_ ? out : scratch_.data() + k * mine;
      reduce_in_rank_order(in, out, mine, op_);
    }
    for (int k = 0; k < n; ++k) {
      if (k == me_) continue;
      if (mine > 0) post_send(out, mine, ranks_[k], 1);
      if (chunk_len(k) > 0) post_recv(buf_ + chunk_begin(k), chunk_len(k), ranks_[k], 1);
    }
    if (outstanding_ == 0) finish_op();
  }

  void finish_op() {
    if (!packed_.empty()) {
      size_t off = 0;
      for (auto& t : tensors_) {
        std::memcpy(t.f32(), packed_.data() + off, t.nbytes());
        off += static_cast<size_t>(t.numel());
      }
    }
    succeed();
  }

  std::vector<int> ranks_;
  int me_;
  ReduceOp op_;
  int tag_base_;
  std::vector<Tensor> tensors_;
  size_t count_ = 0;
  float* buf_ = nullptr;
  std::vector<float> packed_, scratch_;
  int phase_ = 0;
};

class DoneOp final : public RequestState {
 public:
  bool test() override { return true; }
  void wait(double) override {}
};

}  // namespace

std::shared_ptr<MpiGroup> make_mpi_group(std::vector<int> ranks, int my_rank, int world, int max_tag) {
  std::sort(ranks.begin(), ranks.end());
  if (std::adjacent_find(ranks.begin(), ranks.end()) != ranks.end())
    throw std::logic_error(cat("make_group: rank listed twice in ", ranks_text(ranks)));
  auto me = std::find(ranks.begin(), ranks.end(), my_rank);
  if (me == ranks.end())
    throw std::logic_error(cat("make_group: rank ", my_rank, " is not in ", ranks_text(ranks)));
  for (int r : ranks)
    if (r < 0 || r >= world) throw std::logic_error(cat("make_group: rank ", r, " out of world of ", world));
  // Tags of a group's traffic carry a key derived from its rank list and
  // how many groups with that list this rank made before: the same on every
  // member without any communication (so creating a group cannot hang).
  static std::map<std::vector<int>, int> instances;
  static std::map<int, std::vector<int>> keys_in_use;
  int instance = instances[ranks]++;
  uint64_t h = 1469598103934665603ull;
  for (int r : ranks) h = (h ^ static_cast<uint64_t>(r)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(instance + 0x9e37)) * 1099511628211ull;
  int tag_bits = 0;
  while (tag_bits < 31 && (1ll << (tag_bits + 1)) - 1 <= max_tag) ++tag_bits;
  const int key_bits = tag_bits - kSeqBits - 1;
  PD_CHECK(key_bits >= 4, "MPI_TAG_UB ", max_tag, " is too small for group tags");
  int key = static_cast<int>(h % (1ull << key_bits));
  auto it = keys_in_use.find(key);
  if (it != keys_in_use.end()) {
    int shared = 0;
    for (int r : ranks) shared += std::count(it->second.begin(), it->second.end(), r);
    if (shared >= 2)
      throw std::logic_error(cat("make_group: groups ", ranks_text(ranks), " and ",
                                 ranks_text(it->second), " got the same tag key; reorder group creation"));
  }
  keys_in_use[key] = ranks;
  return std::make_shared<MpiGroup>(ranks, static_cast<int>(me - ranks.begin()), key);
}

Request start_mpi_all_reduce(MpiEngine& engine, MpiGroup& group, std::vector<Tensor> tensors, ReduceOp op) {
  if (group.size() == 1) return Request(std::make_shared<DoneOp>());
  const int seq = group.next_seq() & ((1 << kSeqBits) - 1);
  const int tag_base = (group.key() << (kSeqBits + 1)) | seq;
  return engine.launch(std::make_shared<AllReduceOp>(engine, group, std::move(tensors), op, tag_base));
}

}  // namespace pd
