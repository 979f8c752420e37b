#pragma once
// `pipedream run --reference`: every worker's action list executed in one
// process, in a valid global order (round robin over the workers, each
// running until its next action must wait), over in-memory messages with
// the MPI transport's arithmetic. The oracle of the equivalence tests: a
// distributed run must match it bit for bit on CPU.
#include <memory>
#include <vector>

#include "core/safetensors.h"
#include "runtime/executor.h"
#include "runtime/local_transport.h"
#include "runtime/run_spec.h"

namespace pd {

class ReferencePipeline {
 public:
  ReferencePipeline(const RunSpec& spec, const Model& model, const Dataset& train);

  // Runs global steps [seg.first, seg.end) as one schedule.
  void run_segment(const Segment& seg, ExecutorObserver* observer);
  void record_forward_versions(bool on) { record_versions_ = on; }

  // Per rank.
  std::vector<StageState>& states() { return states_; }
  const std::vector<ExecutorStats>& stats() const { return stats_; }
  // (minibatch, version) of every forward, per rank, over the last segment.
  const std::vector<std::vector<std::pair<int64_t, int64_t>>>& forward_versions() const { return versions_; }
  // The whole model: replica 0 of every stage, tensors named as `train` names them.
  NamedTensors merged_weights() const;

 private:
  const RunSpec& spec_;
  const Model& model_;
  const Dataset& train_;
  std::unique_ptr<Optimizer> optimizer_;
  std::vector<StageState> states_;
  bool by_stage_ = false;  // states_ per plan stage (ranks run several), not per rank
  std::vector<ExecutorStats> stats_;
  std::vector<std::vector<std::pair<int64_t, int64_t>>> versions_;
  bool record_versions_ = false;
};

}  // namespace pd
