#pragma once
// All-reduce of the MPI transport: groups (and the tags that keep their
// traffic apart) and the deterministic two-exchange all-reduce.
// Internal to runtime/comm/.
#include <memory>
#include <vector>

#include "runtime/comm/transport.h"

namespace pd {

class MpiEngine;

class MpiGroup final : public CommGroup {
 public:
  MpiGroup(std::vector<int> ranks, int index, int key) : ranks_(std::move(ranks)), index_(index), key_(key) {}
  const std::vector<int>& ranks() const override { return ranks_; }
  int index() const override { return index_; }
  int key() const { return key_; }
  // Sequence number of the next all-reduce (same on all members because
  // they issue them in the same order).
  int next_seq() { return seq_++; }

 private:
  std::vector<int> ranks_;
  int index_, key_, seq_ = 0;
};

// A group of `ranks` (any order, no repeats, holding my_rank) whose tags
// cannot collide with another group sharing two of its members; made
// without communication, so creating a group cannot hang.
std::shared_ptr<MpiGroup> make_mpi_group(std::vector<int> ranks, int my_rank, int world, int max_tag);

// Starts the all-reduce of `tensors` (f32, host) over g.
Request start_mpi_all_reduce(MpiEngine& engine, MpiGroup& g, std::vector<Tensor> tensors, ReduceOp op);

}  // namespace pd
