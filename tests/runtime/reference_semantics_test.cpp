// The weight-policy semantics of docs/design.md §6, checked on the
// single-process reference (the MPI runs are then held to the reference).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "core/cpu/gemm.h"
#include "runtime/reference.h"
#include "runtime/run_report.h"
#include "pipeline_fixture.h"

namespace pd {
namespace {

using testing::plan_1111;
using testing::plan_211;
using testing::small_mlp;
using testing::small_spec;
using testing::train_options;

class LossLog final : public ExecutorObserver {
 public:
  void on_loss(int64_t step, int microbatch, const StepLoss& l) override {
    auto& e = by_step[step];
    e.first += l.loss;
    e.second += 1;
  }
  std::map<int64_t, std::pair<double, int>> by_step;
  float loss(int64_t step) const {
    const auto& e = by_step.at(step);
    return static_cast<float>(e.first / e.second);
  }
};

struct Fixture : ::testing::Test {
  static void SetUpTestSuite() { cpu::set_compute_threads(1); }
  Model model = small_mlp();
  DataSplits data = open_dataset("synthetic", "", model);
};

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Full-model store holding the merged stage weights.
ParameterStore merged(const Model& m, const NamedTensors& t) {
  ParameterStore w = ParameterStore::create(m, 0);
  w.load(t, "reference");
  return w;
}

void expect_weights_bitwise(const ParameterStore& want, const NamedTensors& got) {
  std::map<std::string, Tensor> by;
  for (auto& [n, t] : got) by[n] = t;
  const auto& names = want.param_names();
  for (size_t i = 0; i < names.size(); ++i) {
    ASSERT_TRUE(by.count(names[i])) << names[i];
    EXPECT_TRUE(bitwise_equal(want.all_params()[i], by[names[i]])) << names[i] << " differs";
  }
}

TEST_F(Fixture, VerticalSyncWithoutReplicationIsDelayedSgd) {
  RunSpec spec = small_spec(plan_1111(), parse_schedule_kind("1f1b-rr"), WeightPolicy::Vertical, 14);
  ReferencePipeline ref(spec, model, *data.train);
  LossLog log;
  ref.run_segment({0, spec.steps()}, &log);
  const Schedule sched(spec.plan, spec.schedule);
  TrainResult t = train(model, *data.train, nullptr, train_options(spec, spec.batch, sched.noam() - 1));
  expect_weights_bitwise(t.weights, ref.merged_weights());
  for (int64_t s = 0; s < spec.steps(); ++s) EXPECT_EQ(log.loss(s), t.losses[static_cast<size_t>(s)]) << "step " << s;
}

TEST_F(Fixture, NoDelayOnOneStageIsPlainSgd) {
  RunSpec spec = small_spec(testing::make_plan({{0, 7}}, {1}), parse_schedule_kind("1f1b-rr"),
                            WeightPolicy::Stash, 6);
  ReferencePipeline ref(spec, model, *data.train);
  LossLog log;
  ref.run_segment({0, spec.steps()}, &log);
  TrainResult t = train(model, *data.train, nullptr, train_options(spec, spec.batch));
  expect_weights_bitwise(t.weights, ref.merged_weights());
}

// Stash: minibatch m runs on stage s's version max(0, m - (S-1-s)), forward
// and backward alike. The oracle computes every minibatch's gradient on the
// whole model with each stage's layers taken from that stage's version.
TEST_F(Fixture, StashUsesThePerStageDelays) {
  const Plan plan = plan_1111();
  RunSpec spec = small_spec(plan, parse_schedule_kind("1f1b-rr"), WeightPolicy::Stash, 12);
  ReferencePipeline ref(spec, model, *data.train);
  ref.record_forward_versions(true);
  LossLog log;
  ref.run_segment({0, spec.steps()}, &log);

  const int S = 4;
  for (int r = 0; r < S; ++r)
    for (auto [m, v] : ref.forward_versions()[static_cast<size_t>(r)])
      EXPECT_EQ(v, std::max<int64_t>(0, m - (S - 1 - r))) << "stage " << r << " minibatch " << m;

  // history[s][v]: stage s's weights after absorbing v minibatches.
  auto opt = make_optimizer(spec.optimizer);
  ParameterStore w = ParameterStore::create(model, spec.seed);
  std::vector<std::vector<ParameterStore>> history(S);
  for (int s = 0; s < S; ++s) history[s].push_back(w.clone_params());
  OptimizerState st = opt->make_state(w.all_params());
  const SampleOrder order(data.train->size(), spec.seed);
  const int64_t per_epoch = data.train->size() / spec.batch;
  for (int64_t m = 0; m < spec.steps(); ++m) {
    ParameterStore mixed = w.clone_params();
    for (int s = 0; s < S; ++s) {
      const ParameterStore& h = history[s][static_cast<size_t>(std::max<int64_t>(0, m - (S - 1 - s)))];
      for (int l = plan.stages[s].first_layer; l <= plan.stages[s].last_layer; ++l)
        for (size_t k = 0; k < mixed.params(l).size(); ++k) mixed.params(l)[k].copy_from(h.params(l)[k]);
    }
    ParameterStore g = w.zeros_like_params();
    const MinibatchRef ref_m = locate_minibatch(m, per_epoch);
    StepInfo info{.training = true, .seed = spec.seed, .layer_index = 0, .minibatch_id = static_cast<uint64_t>(m)};
    StepLoss l = compute_gradients(model, mixed, g, fetch(*data.train, order.minibatch(ref_m.epoch, ref_m.index, spec.batch)), info);
    EXPECT_EQ(l.loss, log.loss(m)) << "minibatch " << m;
    opt->step(w.all_params(), g.all_params(), st, spec.lr.lr_at(m));
    for (int s = 0; s < S; ++s) history[s].push_back(w.clone_params());
  }
  expect_weights_bitwise(w, ref.merged_weights());
}

TEST_F(Fixture, FlushSchedulesEqualOneLargeBatch) {
  for (const ScheduleKind* kind : {parse_schedule_kind("gpipe"), parse_schedule_kind("1f1b-flush")}) {
    for (const Plan& plan : {plan_1111(), plan_211()}) {
      RunSpec spec = small_spec(plan, kind, WeightPolicy::Stash, 5, /*microbatches=*/4, /*batch=*/4);
      ReferencePipeline ref(spec, model, *data.train);
      LossLog log;
      ref.run_segment({0, spec.steps()}, &log);
      TrainResult t = train(model, *data.train, nullptr, train_options(spec, 16));
      ParameterStore got = merged(model, ref.merged_weights());
      for (size_t i = 0; i < got.all_params().size(); ++i) {
        std::vector<float> a = got.all_params()[i].to_floats(), b = t.weights.all_params()[i].to_floats();
        for (size_t k = 0; k < a.size(); ++k)
          ASSERT_NEAR(a[k], b[k], 1e-5f + 1e-4f * std::fabs(b[k])) << to_string(kind) << " " << plan.config << " "
                                                                     << got.param_names()[i] << "[" << k << "]";
      }
      for (int64_t s = 0; s < spec.steps(); ++s)
        EXPECT_NEAR(log.loss(s), t.losses[static_cast<size_t>(s)], 1e-5) << to_string(kind) << " step " << s;
    }
  }
}

TEST_F(Fixture, ReplicatedStageKeepsReplicasIdenticalAndFreesVersions) {
  for (WeightPolicy policy : {WeightPolicy::Stash, WeightPolicy::Vertical, WeightPolicy::None}) {
    RunSpec spec = small_spec(plan_211(), parse_schedule_kind("1f1b-rr"), policy, 13);
    ReferencePipeline ref(spec, model, *data.train);
    ref.record_forward_versions(true);
    LossLog log;
    ref.run_segment({0, spec.steps()}, &log);
    EXPECT_EQ(log.by_step.size(), 13u);
    // Both replicas of stage 0 end on the same weights.
    const auto& a = ref.states()[0].weights.all_params();
    const auto& b = ref.states()[1].weights.all_params();
    for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(bitwise_equal(a[i], b[i])) << to_string(policy);
    // Versions of a replicated stage are multiples of its replica count.
    for (int r = 0; r < 2; ++r)
      for (auto [m, v] : ref.forward_versions()[r]) EXPECT_EQ(v % 2, 0) << "minibatch " << m;
    const Schedule sched(spec.plan, spec.schedule);
    // Stash keeps one version per in-flight minibatch plus the newest;
    // vertical also keeps the older versions future forwards will ask for.
    for (int r = 0; r < sched.workers(); ++r) {
      int64_t bound = sched.in_flight_limit(r) + 1;
      if (policy == WeightPolicy::Vertical) {
        int64_t gap = 0;
        for (int64_t m = 0; m < spec.steps(); ++m) gap = std::max(gap, m - sched.vertical_version(sched.stage_of(r), m));
        bound += gap;
      }
      EXPECT_LE(ref.stats()[r].peak_versions, bound) << "rank " << r << " " << to_string(policy);
    }
  }
}

TEST_F(Fixture, SegmentsContinueFromTheSameState) {
  // Two segments run back to back equal the same two segments run by a fresh
  // pipeline that restarts from the first one's state: the resume contract
  // of the runs that drain at checkpoints (1f1b-rr without weight versions).
  RunSpec spec = small_spec(plan_1111(), parse_schedule_kind("1f1b-rr"), WeightPolicy::None, 10);
  spec.checkpoint_every = 6;
  ASSERT_EQ(run_segments(spec, 0).size(), 2u);
  ReferencePipeline a(spec, model, *data.train);
  for (const Segment& s : run_segments(spec, 0)) a.run_segment(s, nullptr);
  ReferencePipeline b(spec, model, *data.train);
  b.run_segment(run_segments(spec, 0)[0], nullptr);
  ReferencePipeline c(spec, model, *data.train);
  for (size_t r = 0; r < c.states().size(); ++r) {
    c.states()[r].weights.copy_params_from(b.states()[r].weights);
    for (size_t k = 0; k < c.states()[r].optimizer.slots.size(); ++k)
      c.states()[r].optimizer.slots[k].copy_from(b.states()[r].optimizer.slots[k]);
    c.states()[r].optimizer.step = b.states()[r].optimizer.step;
    c.states()[r].updates = b.states()[r].updates;
  }
  c.run_segment(run_segments(spec, 6)[0], nullptr);
  NamedTensors wa = a.merged_weights(), wc = c.merged_weights();
  ASSERT_EQ(wa.size(), wc.size());
  for (size_t i = 0; i < wa.size(); ++i) EXPECT_TRUE(bitwise_equal(wa[i].second, wc[i].second)) << wa[i].first;
}

}  // namespace
}  // namespace pd
