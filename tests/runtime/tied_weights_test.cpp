// Tied weights across stages (models/ties.h, runtime/tied_gradients.h):
// gpt-mini tie=1 with its embedding and head in different stages ends at
// `train --microbatches M`'s bits under every synchronous schedule, its
// copies identical, the tied tensor saved once; the exchange sends each
// tied gradient once per peer worker and step; 1f1b-rr and 2bw are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>

#include "core/cpu/gemm.h"
#include "runtime/reference.h"
#include "runtime/tied_gradients.h"
#include "pipeline_fixture.h"

namespace pd {
namespace {

using testing::make_plan;
using testing::small_spec;
using testing::train_options;

class LossLog final : public ExecutorObserver {
 public:
  void on_loss(int64_t step, int, const StepLoss& l) override {
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

// embed (0), block0 (1), block1 (2), ln_f (3), head (4); the head reads 0.token.weight.
Model tied_gpt() { return resolve_model("gpt-mini", "", "tie=1,vocab=32,context=8,width=16,depth=2,heads=2"); }

struct TiedWeights : ::testing::Test {
  static void SetUpTestSuite() { cpu::set_compute_threads(1); }
  Model model = tied_gpt();
  DataSplits data = open_dataset("synthetic", "", model);
};

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Runs `spec` on the reference and `train` with the same microbatches; the
// weights (each tied tensor once, under its owner's name) and losses must be
// the same bits, and every stage's copy of a tied tensor its owner's.
// Replicated stages sum their replicas' gradients in another order than
// train: `bitwise` false compares within fp32 rounding (docs/design.md §8).
void expect_equals_train(const Model& model, const Dataset& train_data, RunSpec spec, const std::string& what,
                         float clip = 0, Precision precision = Precision::FP32, bool bitwise = true) {
  spec.clip_grad_norm = clip;
  spec.precision = precision;
  ReferencePipeline ref(spec, model, train_data);
  LossLog log;
  ref.run_segment({0, spec.steps()}, &log);
  TrainOptions o = train_options(spec, spec.batch * spec.schedule.microbatches);
  o.microbatches = spec.schedule.microbatches;
  o.clip_grad_norm = clip;
  o.precision = precision;
  TrainResult t = train(model, train_data, nullptr, o);

  std::map<std::string, Tensor> got;
  for (auto& [n, w] : ref.merged_weights()) {
    EXPECT_FALSE(got.count(n)) << what << ": " << n << " saved twice";
    got[n] = w;
  }
  for (const TieGroup& g : model.ties)
    for (size_t k = 1; k < g.members.size(); ++k)
      EXPECT_FALSE(got.count(stored_name(g.members[k]))) << what << ": the copy " << stored_name(g.members[k]) << " is saved";
  for (const auto& [n, w] : t.weights.named_tensors()) {
    ASSERT_TRUE(got.count(n)) << what << ": " << n << " missing";
    if (bitwise) {
      EXPECT_TRUE(same_bits(got[n], w)) << what << ": " << n << " differs from train's";
      continue;
    }
    const std::vector<float> a = got[n].to_floats(), b = w.to_floats();
    for (size_t k = 0; k < a.size(); ++k)
      ASSERT_NEAR(a[k], b[k], 1e-5f + 1e-4f * std::fabs(b[k])) << what << ": " << n << "[" << k << "]";
  }
  EXPECT_EQ(got.size(), t.weights.named_tensors().size()) << what;
  for (int64_t s = 0; s < spec.steps(); ++s) {
    if (bitwise) EXPECT_EQ(log.loss(s), t.losses[static_cast<size_t>(s)]) << what << ": loss of step " << s;
    else EXPECT_NEAR(log.loss(s), t.losses[static_cast<size_t>(s)], 1e-5) << what << ": loss of step " << s;
  }
  // Every copy, in every stage and replica, holds its owner's bits.
  for (const TieGroup& g : model.ties)
    for (StageState& st : ref.states())
      for (const TiedTensor& m : g.members)
        if (st.weights.holds(m.layer))
          EXPECT_TRUE(same_bits(st.weights.param(stored_name(m)), got.at(stored_name(g.owner()))))
              << what << ": stage " << st.stage << "'s " << stored_name(m);
}

TEST_F(TiedWeights, ZooGptTakesTieAndInitialisesTheCopyAsTheEmbedding) {
  ASSERT_EQ(model.ties.size(), 1u);
  EXPECT_EQ(stored_name(model.ties[0].owner()), "0.token.weight");
  EXPECT_EQ(stored_name(model.ties[0].members[1]), "4.weight");
  // A stage holding the head alone starts from the embedding's matrix.
  ParameterStore whole = ParameterStore::create(model, 7), head = ParameterStore::create(model, 4, 4, 7);
  EXPECT_TRUE(same_bits(head.param("4.weight"), whole.param("0.token.weight")));
  EXPECT_TRUE(head.is_tie_copy(0));
  EXPECT_TRUE(head.named_tensors().empty()) << "the head's copy is written under the embedding's name only";
  EXPECT_TRUE(resolve_model("gpt-mini", "", "vocab=32,context=8,width=16,depth=2,heads=2").ties.empty());
  EXPECT_THROW(resolve_model("gpt-mini", "", "tie=2"), UserError);
}

// What every run is compared with, checked on its own: the tied gradient is
// the embedding's plus the head's, each once, in both copies.
TEST_F(TiedWeights, TheTiedGradientIsEachReadersGradientAddedOnce) {
  ParameterStore w = ParameterStore::create(model, 7), g = w.zeros_like_params();
  const std::vector<int64_t> idx = {0, 1, 2, 3};
  compute_gradients(model, w, g, fetch(*data.train, idx), {.training = true, .seed = 7});
  const std::vector<float> embed = g.param("0.token.weight").to_floats(), head = g.param("4.weight").to_floats();
  sum_tied_gradients(model, g);
  const std::vector<float> sum = g.param("0.token.weight").to_floats();
  ASSERT_EQ(sum.size(), embed.size());
  bool head_adds = false;
  for (size_t k = 0; k < sum.size(); ++k) {
    ASSERT_EQ(sum[k], embed[k] + head[k]) << k;
    head_adds = head_adds || (head[k] != 0 && embed[k] + head[k] != embed[k]);
  }
  EXPECT_TRUE(head_adds) << "the head's gradient is zero: the test shows nothing";
  EXPECT_EQ(g.param("4.weight").to_floats(), sum);
  // Clipping counts the tensor once.
  EXPECT_EQ(g.params_counted_once().size() + 1, g.all_params().size());
}

TEST_F(TiedWeights, SynchronousSchedulesEqualTrainBitForBit) {
  const Plan split = make_plan({{0, 0}, {1, 1}, {2, 2}, {3, 4}}, {1, 1, 1, 1});
  for (const ScheduleKind* kind : {parse_schedule_kind("gpipe"), parse_schedule_kind("1f1b-flush"), parse_schedule_kind("zb-h1")}) {
    const RunSpec spec = small_spec(split, kind, WeightPolicy::Stash, 3, /*microbatches=*/4, /*batch=*/2);
    expect_equals_train(model, *data.train, spec, to_string(kind));
  }
  // Interleaved: stages 0 and 2 on worker 0, 1 and 3 on worker 1 - the tie
  // crosses workers; and {0,1},{2,3} puts embedding and head on one worker.
  RunSpec il = small_spec(split, parse_schedule_kind("interleaved-1f1b"), WeightPolicy::Stash, 3, 4, 2);
  il.schedule.virtual_stages = 2;
  expect_equals_train(model, *data.train, il, "interleaved-1f1b");
}

// A second tie, between block0 and block2, in stages 0 and 2: worker 0's
// two chunks, which hand their gradients over in process.
TEST_F(TiedWeights, InterleavedChunksOfOneWorkerExchangeInProcess) {
  nlohmann::json spec = zoo_spec("gpt-mini", parse_zoo_options("tie=1,vocab=32,context=8,width=16,depth=3,heads=2"));
  const Model probe = build_model(spec);
  std::string matrix;
  for (const ParamSpec& p : probe.layer(1).param_specs())
    if (matrix.empty() && p.shape.size() == 2) matrix = p.name;
  spec["ties"].push_back({"block0." + matrix, "block2." + matrix});
  const Model two_ties = build_model(spec);
  ASSERT_EQ(two_ties.ties.size(), 2u);
  const DataSplits d = open_dataset("synthetic", "", two_ties);
  RunSpec il = small_spec(make_plan({{0, 1}, {2, 2}, {3, 3}, {4, 5}}, {1, 1, 1, 1}), parse_schedule_kind("interleaved-1f1b"),
                          WeightPolicy::Stash, 3, 4, 2);
  il.schedule.virtual_stages = 2;
  expect_equals_train(two_ties, *d.train, il, "interleaved-1f1b, two ties");
  expect_equals_train(two_ties, *d.train, il, "interleaved-1f1b, two ties, clipped", 0.05f);
}

TEST_F(TiedWeights, ClippingPrecisionAndReplicasKeepTrainsBits) {
  const Plan split = make_plan({{0, 1}, {2, 4}}, {1, 1});
  const RunSpec spec = small_spec(split, parse_schedule_kind("1f1b-flush"), WeightPolicy::Stash, 3, 4, 2);
  expect_equals_train(model, *data.train, spec, "clipped", 0.05f);
  expect_equals_train(model, *data.train, spec, "bf16", 0, Precision::BF16);
  // Replicated stages: each replica of the head's stage receives the
  // embedding's gradient from the first replica of stage 0.
  const RunSpec replicated = small_spec(make_plan({{0, 1}, {2, 4}}, {2, 2}), parse_schedule_kind("1f1b-flush"),
                                        WeightPolicy::Stash, 3, 4, 2);
  expect_equals_train(model, *data.train, replicated, "2-2 replicated", 0, Precision::FP32, /*bitwise=*/false);
}

TEST_F(TiedWeights, TheExchangeSendsTheTiedGradientOncePerPeerAndStep) {
  const Plan split = make_plan({{0, 0}, {1, 1}, {2, 2}, {3, 4}}, {1, 1, 1, 1});
  const RunSpec spec = small_spec(split, parse_schedule_kind("1f1b-flush"), WeightPolicy::Stash, 3, 4, 2);
  ReferencePipeline ref(spec, model, *data.train);
  ref.run_segment({0, spec.steps()}, nullptr);
  const size_t gradient = 32 * 16 * sizeof(float);  // vocab x width
  EXPECT_EQ(ref.stats()[0].tied_bytes, 3 * gradient);
  EXPECT_EQ(ref.stats()[3].tied_bytes, 3 * gradient);
  EXPECT_EQ(ref.stats()[1].tied_bytes, 0u);
  EXPECT_EQ(ref.stats()[2].tied_bytes, 0u);
}

TEST_F(TiedWeights, AsynchronousSchedulesAreRefusedNamingTheOnesThatWork) {
  const Plan split = make_plan({{0, 1}, {2, 4}}, {1, 1});
  for (const ScheduleKind* kind : {parse_schedule_kind("1f1b-rr"), parse_schedule_kind("2bw")}) {
    try {
      tied_stages(model, split, kind);
      ADD_FAILURE() << to_string(kind) << " accepted";
    } catch (const UserError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("0.token.weight in stage 0, 4.weight in stage 1"), std::string::npos) << m;
      // Every synchronous schedule of the registry, as its names say.
      EXPECT_NE(m.find(schedule_names([](const ScheduleKind& k) { return k.flushes() && !k.never_drains(); })),
                std::string::npos)
          << m;
    }
  }
  // The tie within one stage: summed there, every schedule runs.
  const auto one_stage = tied_stages(model, make_plan({{0, 4}}, {2}), parse_schedule_kind("1f1b-rr"));
  ASSERT_NE(one_stage, nullptr);
  EXPECT_EQ(one_stage->bytes, 0u);
}

TEST_F(TiedWeights, ATieWithinOneStageIsSummedThereUnderEverySchedule) {
  const Plan two = make_plan({{0, 0}, {1, 4}}, {1, 1});
  const Plan whole = make_plan({{0, 4}}, {1});
  expect_equals_train(model, *data.train, small_spec(whole, parse_schedule_kind("1f1b-flush"), WeightPolicy::Stash, 3, 4, 2),
                      "one stage, 1f1b-flush");
  // 1f1b-rr on one stage is plain SGD, as train with one microbatch.
  expect_equals_train(model, *data.train, small_spec(whole, parse_schedule_kind("1f1b-rr"), WeightPolicy::Stash, 3, 1, 8),
                      "one stage, 1f1b-rr");
  EXPECT_THROW(tied_stages(model, two, parse_schedule_kind("1f1b-rr")), UserError);
}

}  // namespace
}  // namespace pd
