#include "runtime/reference.h"

#include "core/error.h"
#include "runtime/comm/staged_transport.h"

namespace pd {

ReferencePipeline::ReferencePipeline(const RunSpec& spec, const Model& model, const Dataset& train)
    : spec_(spec), model_(model), train_(train), optimizer_(make_optimizer(spec.optimizer)) {
  const int R = spec.plan.workers();
  for (int r = 0; r < R; ++r) {
    const PlanStage& s = spec.plan.stages[static_cast<size_t>(spec.plan.stage_of_rank(r))];
    states_.push_back(
        make_stage_state(model, s.index, s.first_layer, s.last_layer, spec.seed, *optimizer_, spec.device));
  }
  stats_.resize(static_cast<size_t>(R));
  versions_.resize(static_cast<size_t>(R));
}

void ReferencePipeline::run_segment(const Segment& seg, ExecutorObserver* observer) {
  ScheduleOptions o = spec_.schedule;
  o.minibatches = seg.end - seg.first;
  const Schedule schedule(spec_.plan, o);
  const int R = schedule.workers();
  auto hub = std::make_shared<LocalHub>(R);
  std::vector<std::unique_ptr<LocalTransport>> transports;
  // On a GPU, messages and all-reduces are staged through the host exactly
  // as `run --device cuda` stages them over MPI, so both reduce the same bits.
  std::vector<std::unique_ptr<StagedTransport>> staged;
  std::vector<std::unique_ptr<StageExecutor>> workers;
  StageTraining t;
  t.model = &model_;
  t.train = &train_;
  t.batch = spec_.batch;
  t.seed = spec_.seed;
  t.optimizer = optimizer_.get();
  t.lr = spec_.lr;
  t.first_item = seg.first;
  for (int r = 0; r < R; ++r) {
    transports.push_back(std::make_unique<LocalTransport>(hub, r));
    Transport* tr = transports.back().get();
    if (spec_.device.is_cuda()) {
      staged.push_back(std::make_unique<StagedTransport>(*tr));
      tr = staged.back().get();
    }
    workers.push_back(std::make_unique<StageExecutor>(schedule, r, states_[static_cast<size_t>(r)], t, *tr, observer));
    workers.back()->record_forward_versions(record_versions_);
  }
  std::vector<bool> done(static_cast<size_t>(R), false);
  for (int finished = 0; finished < R;) {
    bool progressed = false;
    for (int r = 0; r < R; ++r) {
      if (done[static_cast<size_t>(r)]) continue;
      for (;;) {
        const auto p = workers[static_cast<size_t>(r)]->step();
        if (p == StageExecutor::Progress::Executed) {
          progressed = true;
          continue;
        }
        if (p == StageExecutor::Progress::Done) {
          done[static_cast<size_t>(r)] = true;
          ++finished;
          progressed = true;
        }
        break;
      }
    }
    PD_CHECK(progressed, "reference execution is stuck: every unfinished worker waits (schedule deadlock)");
  }
  for (int r = 0; r < R; ++r) {
    stats_[static_cast<size_t>(r)] = workers[static_cast<size_t>(r)]->stats();
    versions_[static_cast<size_t>(r)] = workers[static_cast<size_t>(r)]->forward_versions();
  }
}

NamedTensors ReferencePipeline::merged_weights() const {
  NamedTensors out;
  for (const PlanStage& s : spec_.plan.stages) {
    NamedTensors part = states_[static_cast<size_t>(s.ranks.front())].weights.named_tensors();
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace pd
