// Hostile or contradictory inputs to `pipedream` (crashes, hangs, exit 1
// or silent acceptance otherwise): each exits 2, before any work, with a
// message naming the flag or the field.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/safetensors.h"
#include "tests/integration/run_job.h"

namespace pd::testing {
namespace {

namespace fs = std::filesystem;

const std::string kDirToken = "{dir}";
const std::string kPlanCommand = "plan --profile " PD_SOURCE_DIR "/tests/data/pipedream-profiles/vgg16/graph.txt";

// The mlp with hidden=24, depth=3 has 8 layers: one stage holds them all.
const char* kPlan = R"({"format": "pipedream-plan/1", "config": "1", "stages": [
  {"index": 0, "layers": [0, 7], "replicas": 1, "ranks": [0]}]})";
const std::string kRun = "run --plan {dir}/plan.json --model mlp --model-options hidden=24,depth=3 "
                         "--data synthetic --threads-per-worker 1";
const std::string kTrain = "train --model mlp --model-options hidden=24,depth=3 --data synthetic --threads 1";
const std::string kProfile = "profile --batch 2 --threads 1 --warmup 0 --iters 1 --min-time 0";

std::string profile_json(const std::string& model, const std::string& first_layer) {
  return R"({"format": "pipedream-profile/1", "model": ")" + model + R"(", "batch_size": 4, "nodes": [
    {"id": 0, "name": ")" + first_layer + R"(", "forward_ms": 1, "backward_ms": 2, "output_bytes": 8,
     "activation_bytes": 8, "parameter_bytes": 4},
    {"id": 1, "name": "fc2", "forward_ms": 1, "backward_ms": 2, "output_bytes": 8, "activation_bytes": 8,
     "parameter_bytes": 4}], "edges": [[0, 1]]})";
}

void write_checkpoint(const fs::path& root, const std::string& state_step, const std::string& file_step,
                      const std::string& format_field = R"("format": "pipedream-checkpoint/2", )") {
  fs::create_directories(root / "step-4");
  std::ofstream(root / "latest") << "step-4\n";
  std::ofstream(root / "step-4" / "state.json")
      << "{" << format_field << R"("step": )" << state_step << R"(, "layers": [[0, 7]], "checkpoint_every": 4})";
  save_safetensors((root / "step-4" / "stage-0.safetensors").string(), {{"w", Tensor::zeros({2})}},
                   {{"stage", "0"}, {"step", file_step}, {"optimizer_step", "4"}, {"updates", "4"}});
}

void write_overlapping_checkpoint(const fs::path& root) {
  write_checkpoint(root, "4", "4");
  const std::string header = R"({"__metadata__": {"step": "4", "optimizer_step": "4", "updates": "4"},
    "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
    "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})";
  std::ofstream f(root / "step-4" / "stage-0.safetensors", std::ios::binary | std::ios::trunc);
  const uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << std::string(12, '\0');
}

// Every input file the cases use, written once.
class BadInput : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {
 protected:
  // Per process: ctest runs each case as its own process, in parallel.
  static fs::path dir() { return fs::temp_directory_path() / ("pd_cli_bad_input_" + std::to_string(::getpid())); }

  static void SetUpTestSuite() {
    const fs::path d = dir();
    fs::remove_all(d);
    fs::create_directories(d / "folder");
    write_text((d / "plan.json").string(), kPlan);
    write_text((d / "plan_no_replicas.json").string(), R"({"format": "pipedream-plan/1", "config": "1", "stages": [
      {"index": 0, "layers": [0, 7], "replicas": 0, "ranks": []}]})");
    write_text((d / "topology_wraps.json").string(), R"({"levels": [{"count": 4294967298, "bandwidth_GBps": 1}]})");
    write_text((d / "topology_fraction.json").string(), R"({"levels": [{"count": 5.7, "bandwidth_GBps": 1}]})");
    write_text((d / "topology_huge_number.json").string(), R"({"levels": [{"count": 4, "bandwidth_GBps": 1e999}]})");
    write_text((d / "huge_shape.json").string(), R"({"input": {"shape": [4611686018427387904]}, "classes": 10,
      "layers": [{"type": "linear", "out_features": 10}]})");
    write_text((d / "name_number.json").string(), R"({"name": 5, "input": {"shape": [4]}, "classes": 2,
      "layers": [{"type": "linear", "out_features": 2}]})");
    write_checkpoint(d / "ck_1e308", "1e308", "4");
    write_checkpoint(d / "ck_2p64", "18446744073709551620", "4");
    write_checkpoint(d / "ck_minus1", "-1", "4");
    write_checkpoint(d / "ck_disagree", "8", "4");
    write_checkpoint(d / "ck_no_format", "4", "4", "");
    write_checkpoint(d / "ck_future_format", "4", "4", R"("format": "pipedream-checkpoint/9", )");
    write_overlapping_checkpoint(d / "ck_overlap");
    write_text((d / "profile_a.json").string(), profile_json("model-a", "fc1"));
    write_text((d / "profile_b.json").string(), profile_json("model-b", "conv1"));
    std::string apart = profile_json("model-a", "fc1");
    apart.replace(apart.find("[[0, 1]]"), 8, "[]");
    write_text((d / "profile_apart.json").string(), apart);
    const JobResult plan = run_shell(pipedream_binary() + " plan --profile " + (d / "profile_a.json").string() +
                                     " --workers 2 --bandwidth 10 -o " + (d / "plan_a.json").string());
    ASSERT_EQ(plan.exit_code, 0) << plan.output;
  }
  static void TearDownTestSuite() { fs::remove_all(dir()); }

  static std::string expand(std::string args) {
    for (size_t at; (at = args.find(kDirToken)) != std::string::npos;) args.replace(at, kDirToken.size(), dir().string());
    return args;
  }
};

TEST_P(BadInput, ExitsTwoNamingTheField) {
  const auto& [name, args, field] = GetParam();
  const JobResult r = run_shell(pipedream_binary() + " " + expand(args), 60);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(field), std::string::npos) << "expected '" << field << "' in:\n" << r.output;
  // Refused up front: no training or profiling output, no files written.
  EXPECT_EQ(r.output.find("trained"), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(dir() / "folder")) << "something was written into the output folder";
}

using Case = std::tuple<std::string, std::string, std::string>;
INSTANTIATE_TEST_SUITE_P(
    Issue14, BadInput,
    ::testing::Values(
        Case{"TrainLrNan", kTrain + " --minibatches 1 --lr nan", "--lr"},
        Case{"RunPlanWithoutReplicas", "run --reference --plan {dir}/plan_no_replicas.json --model mlp --model-options "
                                       "hidden=24,depth=3 --data synthetic --minibatches 1",
             "\"replicas\" must be at least 1"},
        Case{"TrainMomentumNan", kTrain + " --minibatches 1 --momentum nan", "--momentum"},
        Case{"RunLrNan", kRun + " --minibatches 1 --lr nan", "--lr"},
        Case{"RunMomentumNan", kRun + " --minibatches 1 --momentum NaN", "--momentum"},
        Case{"TrainMinibatchesZero", kTrain + " --minibatches 0", "--minibatches"},
        Case{"TrainMicrobatchesNotDividingBatch", kTrain + " --minibatches 1 --batch 8 --microbatches 3", "--microbatches"},
        Case{"TrainMicrobatchesZero", kTrain + " --minibatches 1 --microbatches 0", "--microbatches"},
        Case{"TrainEpochsZero", kTrain + " --epochs 0", "--epochs"},
        Case{"RunMinibatchesZero", kRun + " --minibatches 0", "--minibatches"},
        Case{"RunEpochsZero", kRun + " --epochs 0", "--epochs"},
        Case{"RunEvalBatchZero", kRun + " --minibatches 1 --eval-batch 0", "--eval-batch"},
        Case{"TrainThreads65536", kTrain + " --minibatches 1 --threads 65536", "--threads"},
        Case{"TrainThreadsWrapping", kTrain + " --minibatches 1 --threads 4294967297", "--threads"},
        Case{"ProfileThreads65536", kProfile + " --model cnn --threads 65536 -o {dir}/folder/p.json", "--threads"},
        Case{"RunThreadsPerWorker100000", kRun + " --minibatches 1 --threads-per-worker 100000",
             "--threads-per-worker"},
        Case{"TrainInputShape2To62", "train --model-spec {dir}/huge_shape.json --data synthetic --minibatches 1",
             "input.shape[0]"},
        Case{"ProfileInputShape2To62", kProfile + " --model-spec {dir}/huge_shape.json -o {dir}/folder/p.json",
             "input.shape[0]"},
        Case{"SpecNameNotAStringIsNotTypeError302",
             "train --model-spec {dir}/name_number.json --data synthetic --minibatches 1", "field 'name'"},
        Case{"ResumeStep1e308", kRun + " --minibatches 8 --resume {dir}/ck_1e308", "field 'step'"},
        Case{"ResumeStep2To64Plus4", kRun + " --minibatches 8 --resume {dir}/ck_2p64", "field 'step'"},
        Case{"ResumeStepMinus1", kRun + " --minibatches 8 --resume {dir}/ck_minus1", "field 'step'"},
        Case{"ResumeStepDisagreesWithStageFiles", kRun + " --minibatches 8 --resume {dir}/ck_disagree",
             "field 'step' is 8 but"},
        Case{"ResumeFormatMissing", kRun + " --minibatches 8 --resume {dir}/ck_no_format", "field 'format'"},
        Case{"ResumeFormatFromTheFuture", kRun + " --minibatches 8 --resume {dir}/ck_future_format",
             "field 'format'"},
        Case{"ResumeOverlappingDataOffsets", kRun + " --minibatches 8 --resume {dir}/ck_overlap", "overlap"},
        Case{"RunReferenceWithCheckpointDir", kRun + " --minibatches 1 --reference --checkpoint-dir {dir}/folder",
             "--checkpoint-dir"},
        Case{"RunReferenceWithTrace", kRun + " --minibatches 1 --reference --trace {dir}/folder/t.json", "--trace"},
        Case{"RunReferenceWithSvg", kRun + " --minibatches 1 --reference --svg {dir}/folder/t.svg", "--svg"},
        Case{"RunSvgIsAFolder", kRun + " --minibatches 1 --svg {dir}/folder", "--svg"},
        Case{"SimulateAnotherModelsProfile",
             "simulate --plan {dir}/plan_a.json --profile {dir}/profile_b.json", "field 'model'"},
        Case{"SimulateNegativeCores", "simulate --plan {dir}/plan_a.json --cores -1", "--cores"},
        Case{"SimulateThreadsWithoutCores", "simulate --plan {dir}/plan_a.json --threads 2", "--threads"},
        Case{"SimulateContentionWithoutCores", "simulate --plan {dir}/plan_a.json --contention 0.1", "--contention"},
        Case{"SimulateNegativeContention", "simulate --plan {dir}/plan_a.json --cores 2 --contention -0.1", "--contention"},
        Case{"SimulateZeroThreads", "simulate --plan {dir}/plan_a.json --cores 2 --threads 0", "--threads"},
        Case{"ProfileOutputIsAFolder", kProfile + " --model cnn -o {dir}/folder", "-o"},
        Case{"TrainSaveIsAFolder", kTrain + " --minibatches 1 --save {dir}/folder", "--save"},
        Case{"PlanOutputIsAFolder", kPlanCommand + " --workers 4 --bandwidth 1 -o {dir}/folder", "-o"},
        Case{"PlanTopologyCountWraps", kPlanCommand + " --topology {dir}/topology_wraps.json", "count"},
        Case{"PlanTopologyCountFraction", kPlanCommand + " --topology {dir}/topology_fraction.json", "count"},
        Case{"PlanTopologyNumberOverflows", kPlanCommand + " --topology {dir}/topology_huge_number.json",
             "topology_huge_number.json"},
        Case{"PlanDisconnectedGraph", "plan --profile {dir}/profile_apart.json --workers 2 --bandwidth 10",
             "node 1 is not connected to node 0"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::get<0>(info.param); });

}  // namespace
}  // namespace pd::testing
