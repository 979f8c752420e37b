// Activation recomputation (docs/design.md §6) changes no bit: a model with
// dropout and BatchNorm, trained through the single-process reference under
// every schedule, in FP32 and bf16, ends with the same weights and the same
// running statistics with the plan's stages recomputing some or all of their
// layers as without. The recomputed forward must draw the same dropout
// masks (else the weights differ) and leave the running statistics alone
// (else they move twice per minibatch).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "core/cpu/gemm.h"
#include "core/precision_names.h"
#include "models/layer_range.h"
#include "runtime/reference.h"
#include "runtime/run_report.h"
#include "pipeline_fixture.h"

namespace pd {
namespace {

using testing::make_plan;
using testing::small_spec;

// 12 top-level layers: conv bn relu dropout conv bn relu flatten fc relu dropout fc.
Model dropout_batchnorm_model() {
  auto layer = [](const char* type, const char* name, nlohmann::json f = nlohmann::json::object()) {
    f["type"] = type;
    f["name"] = name;
    return f;
  };
  nlohmann::json layers = nlohmann::json::array(
      {layer("conv2d", "conv1", {{"out_channels", 4}, {"kernel", 3}, {"padding", 1}}), layer("batchnorm2d", "bn1"),
       layer("relu", "relu1"), layer("dropout", "drop1", {{"p", 0.3}}),
       layer("conv2d", "conv2", {{"out_channels", 4}, {"kernel", 3}, {"padding", 1}}), layer("batchnorm2d", "bn2"),
       layer("relu", "relu2"), layer("flatten", "flatten"), layer("linear", "fc1", {{"out_features", 16}}),
       layer("relu", "relu3"), layer("dropout", "drop2", {{"p", 0.5}}), layer("linear", "fc2", {{"out_features", 4}})});
  return build_model({{"name", "bn-dropout"}, {"input", {{"shape", {2, 6, 6}}}}, {"classes", 4}, {"layers", layers}});
}

struct Case {
  const ScheduleKind* kind;
  std::vector<std::pair<int, int>> ranges;
  std::vector<int> replicas;
  int microbatches = 1, virtual_stages = 1;
};

std::vector<Case> cases() {
  const std::vector<std::pair<int, int>> two = {{0, 5}, {6, 11}}, four = {{0, 2}, {3, 5}, {6, 8}, {9, 11}};
  return {
      {parse_schedule_kind("1f1b-rr"), two, {1, 1}},
      {parse_schedule_kind("1f1b-rr"), two, {2, 1}},  // a replicated stage: the bucketed backward
      {parse_schedule_kind("1f1b-flush"), two, {1, 1}, 4},
      {parse_schedule_kind("gpipe"), two, {1, 1}, 4},
      {parse_schedule_kind("zb-h1"), two, {1, 1}, 4},     // split B and W
      {parse_schedule_kind("interleaved-1f1b"), four, {1, 1, 1, 1}, 4, 2},
  };
}

// Every stage recomputes the layers `pick` selects.
Plan with_recompute(Plan p, bool (*pick)(int layer)) {
  for (PlanStage& s : p.stages)
    for (int l = s.first_layer; l <= s.last_layer; ++l)
      if (pick(l)) s.recompute_layers.push_back(l);
  return p;
}

// The weights and the running statistics after training.
NamedTensors train_through_reference(const Model& model, const Dataset& train, const Case& c, const Plan& plan,
                                     Precision precision) {
  RunSpec spec = small_spec(plan, c.kind, WeightPolicy::Stash, 4, c.microbatches, 8);
  spec.schedule.virtual_stages = c.virtual_stages;
  spec.precision = precision;
  ReferencePipeline ref(spec, model, train);
  ref.run_segment({0, spec.steps()}, nullptr);
  return ref.merged_weights();  // (the running statistics too)
}

void expect_same_bits(const NamedTensors& want, const NamedTensors& got, const std::string& what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (size_t i = 0; i < want.size(); ++i) {
    const Tensor &a = want[i].second, &b = got[i].second;
    ASSERT_EQ(a.shape(), b.shape()) << what << " " << want[i].first;
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0) << what << ": " << want[i].first << " differs";
  }
}

struct Recompute : ::testing::Test {
  static void SetUpTestSuite() { cpu::set_compute_threads(1); }
  Model model = dropout_batchnorm_model();
  DataSplits data = open_dataset("synthetic", "", model);
};

void check_schedules(const Model& model, const Dataset& train, Precision precision) {
  for (const Case& c : cases()) {
    const Plan plain = make_plan(c.ranges, c.replicas);
    const NamedTensors want = train_through_reference(model, train, c, plain, precision);
    const std::string what = to_string(c.kind) + " " + plain.config + " " + std::string(to_string(precision));
    expect_same_bits(want, train_through_reference(model, train, c, with_recompute(plain, [](int) { return true; }),
                                                   precision),
                     what + ", every layer recomputed");
    expect_same_bits(want, train_through_reference(model, train, c, with_recompute(plain, [](int l) { return l % 2 == 1; }),
                                                   precision),
                     what + ", every other layer recomputed");
  }
}

TEST_F(Recompute, ChangesNoBitUnderEveryScheduleInFp32) { check_schedules(model, *data.train, Precision::FP32); }

TEST_F(Recompute, ChangesNoBitUnderEveryScheduleInBf16) { check_schedules(model, *data.train, Precision::BF16); }

// The layer-range level: between forward and backward a recomputed layer
// keeps its input only. Recomputing the dropout layers drops their masks;
// their inputs are the ReLUs' outputs, which the ReLUs keep anyway.
// (Recomputing every layer keeps every layer's input, which here is more
// than the contexts share: what the planner's cost model weighs.)
TEST_F(Recompute, KeepsOnlyTheInputsOfRecomputedLayers) {
  ParameterStore w = ParameterStore::create(model, 0, 11, 3);
  Tensor x = Tensor::zeros({4, 2, 6, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.f32()[i] = float(i % 7) - 3.0f;
  const StepInfo step{.training = true, .seed = 5, .minibatch_id = 1};
  RangeContext kept, dropped;
  forward_layers(model, w, 0, 11, x, step, kept);
  dropped.recompute.assign(12, false);
  dropped.recompute[3] = dropped.recompute[10] = true;
  forward_layers(model, w, 0, 11, x, step, dropped);
  for (int l : {3, 10}) {
    EXPECT_TRUE(dropped.layers[size_t(l)].saved.empty()) << "layer " << l;
    EXPECT_TRUE(dropped.dropped[size_t(l)].input.defined()) << "layer " << l;
  }
  EXPECT_FALSE(dropped.layers[2].saved.empty());
  EXPECT_EQ(kept.saved_bytes() - dropped.saved_bytes(),
            kept.layers[3].saved_bytes() + kept.layers[10].saved_bytes());
}

}  // namespace
}  // namespace pd
