// measure_profile: what it records per layer (bytes, names, edges, run
// facts), how it validates options, and that its output is a profile the
// format and the planner accept. No timing assertions beyond "positive".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "models/layer_range.h"
#include "models/parameters.h"
#include "profiler/measure.h"

namespace pd {
namespace {

ProfileOptions quick(int64_t batch = 4) {
  ProfileOptions o;
  o.batch = batch;
  o.threads = 1;
  o.warmup = 1;
  o.iters = 3;
  return o;
}

Model small_mlp() { return build_model(zoo_spec("mlp", {{"hidden", 32}, {"depth", 2}})); }

TEST(MeasureProfile, RecordsRunFactsAndOneNodePerTopLevelLayer) {
  Model m = small_mlp();
  Profile p = measure_profile(m, quick(4));
  EXPECT_EQ(p.format, "pipedream-profile/1");
  EXPECT_EQ(p.model, m.name);
  EXPECT_EQ(p.device, "cpu");
  EXPECT_EQ(p.dtype, "f32");
  EXPECT_EQ(p.batch_size, 4);
  EXPECT_EQ(p.threads, 1);
  EXPECT_EQ(cpu::compute_threads(), 1);
  ASSERT_EQ(p.nodes.size(), static_cast<size_t>(m.size()));
  EXPECT_TRUE(p.is_chain());
  for (int i = 0; i < m.size(); ++i) {
    const ProfileNode& n = p.nodes[static_cast<size_t>(i)];
    EXPECT_EQ(n.id, i);
    EXPECT_EQ(n.name, m.layers[static_cast<size_t>(i)].name);
    EXPECT_EQ(n.op, m.layer(i).type());
    EXPECT_GT(n.forward_ms, 0);
    // mlp starts with flatten: below the first layer with parameters no
    // backward runs in training, so none is timed.
    if (i == 0) EXPECT_EQ(n.backward_ms, 0) << n.name;
    else EXPECT_GT(n.backward_ms, 0) << n.name;
    EXPECT_GE(n.forward_p90_ms, n.forward_ms);
    EXPECT_GE(n.backward_p90_ms, n.backward_ms);
    Shape out = m.layers[static_cast<size_t>(i)].output_shape;
    EXPECT_EQ(n.output_bytes, uint64_t(4 * shape_numel(out) * 4)) << n.name;
  }
  EXPECT_GT(p.step_forward_backward_ms, 0);
  EXPECT_GT(layer_time_sum_ms(p), 0);
}

TEST(MeasureProfile, ParameterAndOptimizerBytesFollowTheModelAndOptimizer) {
  Model m = small_mlp();
  Profile sgd = measure_profile(m, quick());
  uint64_t params = 0, state = 0;
  for (const auto& n : sgd.nodes) params += n.parameter_bytes, state += n.optimizer_state_bytes;
  EXPECT_EQ(params, uint64_t(m.parameter_count()) * 4);
  EXPECT_EQ(state, params);  // default: SGD with momentum, one slot
  EXPECT_EQ(optimizer_state_description(ProfileOptions{}.optimizer), "sgd (momentum 0.9): 1 slot per parameter");

  ProfileOptions adam = quick();
  adam.optimizer.kind = OptimizerKind::adam;
  adam.optimizer.momentum = 0;
  Profile a = measure_profile(m, adam);
  for (size_t i = 0; i < a.nodes.size(); ++i)
    EXPECT_EQ(a.nodes[i].optimizer_state_bytes, 2 * a.nodes[i].parameter_bytes);

  ProfileOptions plain = quick();
  plain.optimizer.momentum = 0;
  for (const auto& n : measure_profile(m, plain).nodes) EXPECT_EQ(n.optimizer_state_bytes, 0u);
}

// The optimizer step's time is measured and shared by parameter bytes: a
// layer without parameters has none, the others in proportion.
TEST(MeasureProfile, OptimizerStepTimeFollowsParameterBytes) {
  const Profile p = measure_profile(small_mlp(), quick());
  const ProfileNode* reference = nullptr;
  for (const ProfileNode& n : p.nodes) {
    if (n.parameter_bytes == 0) {
      EXPECT_EQ(n.optimizer_ms, 0) << n.name;
      continue;
    }
    EXPECT_GT(n.optimizer_ms, 0) << n.name;
    if (!reference) reference = &n;
    EXPECT_NEAR(n.optimizer_ms / reference->optimizer_ms,
                double(n.parameter_bytes) / double(reference->parameter_bytes), 1e-9) << n.name;
  }
}

TEST(MeasureProfile, ActivationBytesAreWhatForwardSavesForBackward) {
  Model m = build_model(zoo_spec("cnn"));
  Profile p = measure_profile(m, quick(2));
  ParameterStore w = ParameterStore::create(m, 0);
  Shape in = m.input_shape;
  in.insert(in.begin(), 2);
  RangeContext ctx;
  forward_layers(m, w, 0, m.size() - 1, Tensor::zeros(in), StepInfo{}, ctx);
  for (int i = 0; i < m.size(); ++i)
    EXPECT_EQ(p.nodes[static_cast<size_t>(i)].activation_bytes, ctx.layers[static_cast<size_t>(i)].saved_bytes())
        << p.nodes[static_cast<size_t>(i)].name;
  EXPECT_GT(p.nodes[0].activation_bytes, 0u);  // conv1 keeps its input
}

// What a stage holds while it computes, layer by layer: the forward's own
// working memory (its output and temporaries, not its input or what it
// keeps), and the storage a layer keeps that the layer before keeps too.
TEST(MeasureProfile, ForwardWorkingMemoryAndTheTensorsNeighboursShare) {
  Model m = build_model(zoo_spec("cnn"));
  Profile p = measure_profile(m, quick(2));
  auto node = [&](const std::string& name) -> const ProfileNode& {
    for (const ProfileNode& n : p.nodes)
      if (n.name == name) return n;
    throw std::runtime_error("no layer " + name);
  };
  // A ReLU allocates its output, which it keeps, and nothing else: its
  // forward's working memory is that output, not its backward's figure
  // (the gradient it receives and the one it makes: twice as much).
  EXPECT_EQ(node("relu2").forward_workspace_bytes, node("relu2").output_bytes);
  EXPECT_EQ(node("relu2").workspace_bytes, 2 * node("relu2").output_bytes);
  EXPECT_EQ(node("flatten").forward_workspace_bytes, 0u);  // a view of its input
  // fc2 keeps its input, relu3's output, which relu3 keeps too.
  EXPECT_EQ(node("fc2").shared_activation_bytes, node("relu3").output_bytes);
  EXPECT_EQ(node("relu3").shared_activation_bytes, 0u);  // fc1 keeps its input, not its output
  // A W accumulates into the gradient buffers: measured, nothing more.
  EXPECT_EQ(node("conv2").weight_workspace_bytes, std::optional<uint64_t>(0));
  EXPECT_FALSE(node("relu2").weight_workspace_bytes.has_value());  // no W
}

TEST(MeasureProfile, LanguageModelUsesTokenInputs) {
  Model m = build_model(zoo_spec("gpt-mini", {{"context", 8}, {"width", 16}, {"depth", 1}, {"heads", 2}, {"vocab", 32}}));
  Profile p = measure_profile(m, quick(2));
  ASSERT_EQ(p.nodes.size(), static_cast<size_t>(m.size()));
  // logits [batch, context, vocab]
  EXPECT_EQ(p.nodes.back().output_bytes, uint64_t(2 * 8 * 32 * 4));
}

TEST(MeasureProfile, ReportsEveryIterationToTheProgressCallback) {
  ProfileOptions o = quick();
  o.warmup = 2;
  o.iters = 3;
  std::vector<ProfileProgress> seen;
  o.progress = [&](const ProfileProgress& p) { seen.push_back(p); };
  measure_profile(small_mlp(), o);
  ASSERT_EQ(seen.size(), 5u);
  EXPECT_TRUE(seen[0].warmup);
  EXPECT_EQ(seen[1].iteration, 2);
  EXPECT_EQ(seen[1].iterations, 2);
  EXPECT_FALSE(seen[2].warmup);
  EXPECT_EQ(seen[2].iteration, 1);
  EXPECT_EQ(seen[4].iteration, 3);
  EXPECT_EQ(seen[4].iterations, 3);
  for (size_t i = 0; i < seen.size(); ++i) EXPECT_EQ(seen[i].last, i == 1 || i == 4) << i;
}

TEST(MeasureProfile, MinSecondsMeasuresMoreIterationsUntilThatLong) {
  ProfileOptions o = quick();
  o.warmup = 1;
  o.iters = 2;
  o.min_seconds = 0.3;
  std::vector<ProfileProgress> seen;
  o.progress = [&](const ProfileProgress& p) { seen.push_back(p); };
  MeasureDetails d;
  Profile p = measure_profile(small_mlp(), o, &d);
  // A 4-sample mlp step takes microseconds: 0.3 s needs far more than 2.
  EXPECT_GT(p.measured_iterations, 2);
  EXPECT_GE(p.measured_seconds, 0.3);
  EXPECT_EQ(p.warmup_iterations, 1);
  EXPECT_EQ(d.whole_step_ms.size(), static_cast<size_t>(p.measured_iterations));
  // The host probe runs once per measured iteration; its median is recorded.
  ASSERT_EQ(d.host_probe_ms.size(), static_cast<size_t>(p.measured_iterations));
  EXPECT_DOUBLE_EQ(p.host_probe_ms, sample_median(d.host_probe_ms));
  EXPECT_GT(p.host_probe_ms, 0);
  ASSERT_EQ(seen.size(), static_cast<size_t>(1 + p.measured_iterations));
  EXPECT_TRUE(seen.back().last);
  EXPECT_GE(seen.back().elapsed_s, 0.3);
  EXPECT_FALSE(seen[seen.size() - 2].last);
  EXPECT_LT(seen[seen.size() - 2].elapsed_s, 0.3);

  o.min_seconds = 0;
  EXPECT_EQ(measure_profile(small_mlp(), o).measured_iterations, 2);
}

TEST(MeasureProfile, DriftBetweenHalvesComparesTheMediansOfEachHalfInOrder) {
  EXPECT_DOUBLE_EQ(drift_between_halves({1, 1, 1}), 0.0);  // too few to split
  EXPECT_DOUBLE_EQ(drift_between_halves({1, 9, 1, 1, 2, 2, 9, 2}), 1.0);  // medians 1 and 2
  EXPECT_DOUBLE_EQ(drift_between_halves({2, 2, 1, 1}), 1.0);  // either direction
  // The same samples, interleaved instead of drifting: no drift.
  EXPECT_DOUBLE_EQ(drift_between_halves({1, 2, 1, 2, 1, 2, 1, 2}), 0.0);
}

TEST(MeasureProfile, RejectsOptionsThatCannotBeMeasured) {
  Model m = small_mlp();
  auto with = [](auto change) {
    ProfileOptions o = quick();
    change(o);
    return o;
  };
  EXPECT_THROW(measure_profile(m, with([](ProfileOptions& o) { o.batch = 0; })), UserError);
  EXPECT_THROW(measure_profile(m, with([](ProfileOptions& o) { o.iters = 0; })), UserError);
  EXPECT_THROW(measure_profile(m, with([](ProfileOptions& o) { o.warmup = -1; })), UserError);
  EXPECT_THROW(measure_profile(m, with([](ProfileOptions& o) { o.threads = -2; })), UserError);
  EXPECT_THROW(measure_profile(m, with([](ProfileOptions& o) { o.min_seconds = -1; })), UserError);
  EXPECT_THROW(measure_profile(m, with([](ProfileOptions& o) { o.min_seconds = std::nan(""); })), UserError);
#ifndef PIPEDREAM_HAVE_CUDA
  try {
    measure_profile(m, with([](ProfileOptions& o) { o.device = Device::cuda(0); }));
    FAIL() << "a CUDA device in a CPU-only build must be refused";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("without CUDA"), std::string::npos) << e.what();
  }
#endif
}

// --microbatches M: every node also gets its times at batch / M, ascending,
// and they survive the file.
TEST(MeasureProfile, MicrobatchesAddEveryNodesTimesAtTheSmallerBatches) {
  ProfileOptions o = quick(8);
  o.microbatches = {2, 8};
  const Profile p = measure_profile(small_mlp(), o);
  EXPECT_EQ(p.batch_size, 8);
  EXPECT_EQ(p.measured_microbatch_sizes(), (std::vector<int>{1, 4}));
  for (const ProfileNode& n : p.nodes) {
    ASSERT_EQ(n.at_batch.size(), 2u) << n.name;
    EXPECT_EQ(n.at_batch[0].batch, 1);
    EXPECT_EQ(n.at_batch[1].batch, 4);
    EXPECT_GE(n.at_batch[0].forward_ms, 0);
  }
  std::string path = (std::filesystem::temp_directory_path() / "pd_measure_microbatches.json").string();
  write_profile_json(p, path);
  const Profile r = read_profile(path);
  std::remove(path.c_str());
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    ASSERT_EQ(r.nodes[i].at_batch.size(), 2u);
    EXPECT_DOUBLE_EQ(r.nodes[i].at_batch[1].backward_ms, p.nodes[i].at_batch[1].backward_ms);
  }
  for (std::vector<int> bad : {std::vector<int>{3}, {1}, {16}, {2, 2}}) {
    o.microbatches = bad;
    EXPECT_THROW(measure_profile(small_mlp(), o), UserError) << bad[0];
  }
}

TEST(MeasureProfile, WrittenProfileReadsBackWithTheSameNodes) {
  Profile p = measure_profile(small_mlp(), quick());
  std::string path = (std::filesystem::temp_directory_path() / "pd_measure_roundtrip.json").string();
  write_profile_json(p, path);
  Profile r = read_profile(path);
  std::remove(path.c_str());
  EXPECT_EQ(r.model, p.model);
  EXPECT_EQ(r.batch_size, p.batch_size);
  EXPECT_EQ(r.threads, p.threads);
  EXPECT_DOUBLE_EQ(r.step_forward_backward_ms, p.step_forward_backward_ms);
  EXPECT_EQ(r.warmup_iterations, 1);
  EXPECT_EQ(r.measured_iterations, 3);
  EXPECT_DOUBLE_EQ(r.measured_seconds, p.measured_seconds);
  EXPECT_GT(p.host_probe_ms, 0);
  EXPECT_DOUBLE_EQ(r.host_probe_ms, p.host_probe_ms);
  ASSERT_EQ(r.nodes.size(), p.nodes.size());
  for (size_t i = 0; i < p.nodes.size(); ++i) {
    EXPECT_EQ(r.nodes[i].name, p.nodes[i].name);
    EXPECT_DOUBLE_EQ(r.nodes[i].forward_ms, p.nodes[i].forward_ms);
    EXPECT_DOUBLE_EQ(r.nodes[i].backward_p90_ms, p.nodes[i].backward_p90_ms);
    EXPECT_EQ(r.nodes[i].activation_bytes, p.nodes[i].activation_bytes);
    EXPECT_EQ(r.nodes[i].optimizer_state_bytes, p.nodes[i].optimizer_state_bytes);
  }
  EXPECT_EQ(r.edges, p.edges);
}

}  // namespace
}  // namespace pd
