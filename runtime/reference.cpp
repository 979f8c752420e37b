#include "runtime/reference.h"

#include "core/device_ops.h"
#include "core/error.h"
#include "runtime/comm/staged_transport.h"

namespace pd {

ReferencePipeline::ReferencePipeline(const RunSpec& spec, const Model& model, const Dataset& train)
    : spec_(spec), model_(model), train_(train), optimizer_(make_optimizer(spec.optimizer)) {
  // One state per rank; per stage where a rank runs several (interleaved-1f1b, the V shapes).
  ScheduleOptions placement = spec.schedule;
  placement.minibatches = 1;  // where stages run does not depend on the length
  by_stage_ = Schedule(spec.plan, placement).chunks() > 1;
  const int R = spec.plan.workers();
  for (int r = 0; r < R; ++r) {
    const PlanStage& s = spec.plan.stages[static_cast<size_t>(by_stage_ ? r : spec.plan.stage_of_rank(r))];
    states_.push_back(
        make_stage_state(model, s.index, s.first_layer, s.last_layer, spec.seed, *optimizer_, spec.device));
    states_.back().recompute = recompute_flags(s);
  }
  if (!spec.init.empty()) {
    const NamedTensors w = load_named_weights(model, spec.init);
    for (StageState& s : states_) s.weights.load(w, "--init");
  }
  stats_.resize(static_cast<size_t>(R));
  versions_.resize(static_cast<size_t>(R));
}

void ReferencePipeline::run_segment(const Segment& seg, ExecutorObserver* observer) {
  ScheduleOptions o = spec_.schedule;
  o.minibatches = seg.end - seg.first;
  Schedule schedule(spec_.plan, o);
  if (spec_.schedule_lists) schedule.use_lists(spec_.schedule_lists.get());  // one segment: the whole run
  const int R = schedule.workers();
  // Executors: one per rank, or per stage where a rank runs several (each
  // chunk of a rank is an independent stage, so any order that respects
  // their messages gives the same bits).
  const int E = R * schedule.chunks();
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
  t.precision = spec_.precision;
  t.optimizer = optimizer_.get();
  t.lr = spec_.lr;
  t.clip_grad_norm = spec_.clip_grad_norm;
  if (t.clip_grad_norm > 0) t.local_norms = std::make_shared<LocalNormBoard>();  // interleaved: a rank's chunks
  t.ties = tied_stages(model_, spec_.plan, spec_.schedule.kind);
  t.first_item = seg.first;
  std::vector<Transport*> rank_transport;
  for (int r = 0; r < R; ++r) {
    transports.push_back(std::make_unique<LocalTransport>(hub, r));
    Transport* tr = transports.back().get();
    if (spec_.device.is_cuda()) {
      staged.push_back(std::make_unique<StagedTransport>(*tr));
      tr = staged.back().get();
    }
    rank_transport.push_back(tr);
  }
  for (int e = 0; e < E; ++e) {
    const int r = e % R, chunk = e / R;
    const size_t state = static_cast<size_t>(schedule.chunks() > 1 ? schedule.stage_of(r, chunk) : e);
    workers.push_back(std::make_unique<StageExecutor>(schedule, r, states_[state], t,
                                                      *rank_transport[static_cast<size_t>(r)], observer, chunk));
    workers.back()->record_forward_versions(record_versions_);
  }
  std::vector<bool> done(static_cast<size_t>(E), false);
  for (int finished = 0; finished < E;) {
    bool progressed = false;
    for (int r = 0; r < E; ++r) {
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
  for (int e = 0; e < E; ++e) {
    stats_[static_cast<size_t>(e)] = workers[static_cast<size_t>(e)]->stats();
    versions_[static_cast<size_t>(e)] = workers[static_cast<size_t>(e)]->forward_versions();
  }
}

NamedTensors ReferencePipeline::merged_weights() const {
  NamedTensors out;
  for (const PlanStage& s : spec_.plan.stages) {
    const int holder = by_stage_ ? s.index : s.ranks.front();
    NamedTensors part = states_[static_cast<size_t>(holder)].weights.named_tensors();
    out.insert(out.end(), part.begin(), part.end());
  }
  return out;
}

}  // namespace pd
