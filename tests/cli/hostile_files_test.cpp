// Hostile input files given to `pipedream`: JSON nested 70,000 levels deep
// (used to overflow the stack: SIGSEGV), devices such as /dev/zero (used to
// be read until std::bad_alloc), folders, a schedule CSV declaring 2^63
// minibatches. Each exits 2 with a message naming the file and the field.
// Also: a failed or killed run leaves an existing --metrics file whole.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "core/safetensors.h"
#include "tests/integration/run_job.h"

namespace pd::testing {
namespace {

namespace fs = std::filesystem;

const std::string kDirToken = "{dir}";
const std::string kGraph = PD_SOURCE_DIR "/tests/data/pipedream-profiles/vgg16/graph.txt";
const char* kPlan = R"({"format": "pipedream-plan/1", "config": "1", "stages": [
  {"index": 0, "layers": [0, 7], "replicas": 1, "ranks": [0]}]})";
const std::string kModel = " --model mlp --model-options hidden=24,depth=3 --data synthetic";
const std::string kRun = "run --plan {dir}/plan.json" + kModel + " --threads-per-worker 1";
const std::string kTrain = "train" + kModel + " --threads 1";

std::string deep(size_t depth = 70000) { return std::string(depth, '[') + "0" + std::string(depth, ']'); }

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

class HostileFiles : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {
 protected:
  static fs::path dir() { return fs::temp_directory_path() / ("pd_cli_hostile_" + std::to_string(::getpid())); }

  static void SetUpTestSuite() {
    const fs::path d = dir();
    fs::remove_all(d);
    fs::create_directories(d / "folder");
    write_text((d / "plan.json").string(), kPlan);
    save_safetensors((d / "w.safetensors").string(), {{"w", Tensor::zeros({2})}});
    write_text((d / "deep_spec.json").string(),
               R"({"input": {"shape": [1, 8, 8]}, "classes": 2, "layers": [{"type": "conv2d", "out_channels": 2,
                   "kernel": )" + deep() + R"(}, {"type": "flatten"}, {"type": "linear", "out_features": 2}]})");
    write_text((d / "deep_profile.json").string(),
               R"({"format": "pipedream-profile/1", "model": "m", "batch_size": 4, "nodes": [
                   {"id": 0, "name": "a", "forward_ms": )" + deep() + R"(, "backward_ms": 2, "output_bytes": 8,
                    "activation_bytes": 8, "parameter_bytes": 4}], "edges": []})");
    write_text((d / "deep_topology.json").string(), R"({"levels": [{"count": )" + deep() + R"(, "bandwidth_GBps": 1}]})");
    write_text((d / "deep_plan.json").string(), R"({"format": "pipedream-plan/1", "config": "1", "stages": [
      {"index": 0, "layers": [0, 7], "replicas": )" + deep() + R"(, "ranks": [0]}]})");
    fs::create_directories(d / "deep_ckpt" / "step-4");
    write_text((d / "deep_ckpt" / "latest").string(), "step-4\n");
    write_text((d / "deep_ckpt" / "step-4" / "state.json").string(),
               R"({"format": "pipedream-checkpoint/1", "step": )" + deep() + R"(, "layers": [[0, 7]]})");
    write_text((d / "huge_minibatches.csv").string(),
               "# pipedream-schedule/1 schedule=1f1b-rr weights=stash microbatches=1 "
               "minibatches=9223372036854775807 workers=1\nrank,stage,action\n");
  }
  static void TearDownTestSuite() { fs::remove_all(dir()); }

  static std::string expand(std::string args) {
    for (size_t at; (at = args.find(kDirToken)) != std::string::npos;) args.replace(at, kDirToken.size(), dir().string());
    return args;
  }
};

TEST_P(HostileFiles, ExitsTwoNamingTheFieldOrFile) {
  const auto& [name, args, want] = GetParam();
  const JobResult r = run_shell(pipedream_binary() + " " + expand(args) + " < /dev/null", 60);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output.substr(0, 2000);
  EXPECT_NE(r.output.find(expand(want)), std::string::npos) << "expected '" << expand(want) << "' in:\n"
                                                             << r.output.substr(0, 2000);
  EXPECT_EQ(r.output.find("bad_alloc"), std::string::npos) << r.output.substr(0, 2000);
  EXPECT_TRUE(fs::is_empty(dir() / "folder")) << "something was written into the output folder";
}

using Case = std::tuple<std::string, std::string, std::string>;
INSTANTIATE_TEST_SUITE_P(
    Readers, HostileFiles,
    ::testing::Values(
        // Nested 70,000 levels deep: was SIGSEGV (exit 139).
        Case{"DeepModelSpec", "models --model-spec {dir}/deep_spec.json", "field 'layers[0].kernel[0]"},
        Case{"DeepModelSpecTrain", "train --model-spec {dir}/deep_spec.json --data synthetic --minibatches 1",
             "field 'layers[0].kernel[0]"},
        Case{"DeepProfile", "plan --profile {dir}/deep_profile.json --workers 2 --bandwidth 10",
             "field 'nodes[0].forward_ms[0]"},
        Case{"DeepTopology", "plan --profile " + kGraph + " --topology {dir}/deep_topology.json",
             "field 'levels[0].count[0]"},
        Case{"DeepPlanSimulate", "simulate --plan {dir}/deep_plan.json", "field 'stages[0].replicas[0]"},
        Case{"DeepPlanSchedule", "schedule --plan {dir}/deep_plan.json", "field 'stages[0].replicas[0]"},
        Case{"DeepPlanRun", "run --plan {dir}/deep_plan.json" + kModel + " --minibatches 1",
             "field 'stages[0].replicas[0]"},
        Case{"DeepCheckpointState", kRun + " --minibatches 8 --resume {dir}/deep_ckpt", "field 'step[0]"},
        // Devices: were read past 2 GB, then std::bad_alloc.
        Case{"PlanProfileDevZero", "plan --profile /dev/zero --workers 2 --bandwidth 10",
             "/dev/zero: the profile is not a regular file"},
        Case{"PlanProfileDevUrandom", "plan --profile /dev/urandom --workers 2 --bandwidth 10",
             "/dev/urandom: the profile is not a regular file"},
        Case{"PlanTopologyDevZero", "plan --profile " + kGraph + " --topology /dev/zero",
             "/dev/zero: the topology file is not a regular file"},
        Case{"SimulatePlanDevZero", "simulate --plan /dev/zero", "/dev/zero: the plan is not a regular file"},
        Case{"SimulateProfileDevZero", "simulate --plan {dir}/plan.json --profile /dev/zero",
             "/dev/zero: the profile is not a regular file"},
        Case{"SimulateScheduleFileDevUrandom", "simulate --plan {dir}/plan.json --schedule-file /dev/urandom",
             "/dev/urandom: the schedule file is not a regular file"},
        Case{"SchedulePlanDevZero", "schedule --plan /dev/zero", "/dev/zero: the plan is not a regular file"},
        Case{"RunPlanDevZero", "run --plan /dev/zero" + kModel + " --minibatches 1",
             "/dev/zero: the plan is not a regular file"},
        Case{"ExportOnnxDevZero", "export --onnx /dev/zero --weights {dir}/w.safetensors -o {dir}/folder/out.onnx",
             "/dev/zero: the ONNX model is not a regular file"},
        Case{"ExportWeightsDevZero", "export --onnx {dir}/plan.json --weights /dev/zero -o {dir}/folder/out.onnx",
             "/dev/zero: the safetensors file is not a regular file"},
        Case{"ModelSpecDevZero", "models --model-spec /dev/zero", "/dev/zero: the model spec is not a regular file"},
        // Folders: were exit 1 "basic_filebuf::underflow ... Is a directory".
        Case{"ModelSpecFolder", "models --model-spec {dir}/folder", "{dir}/folder: the model spec is a folder"},
        Case{"ExportOnnxFolder", "export --onnx {dir}/folder --weights {dir}/w.safetensors -o {dir}/out.onnx",
             "{dir}/folder: the ONNX model is a folder"},
        // Was std::bad_alloc.
        Case{"ScheduleCsvMinibatches2To63", "simulate --plan {dir}/plan.json --schedule-file {dir}/huge_minibatches.csv",
             "field 'minibatches' must be an integer in [1, 16777216]"}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::get<0>(info.param); });

// ---- --metrics ---------------------------------------------------------------

class MetricsFile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir("metrics_file");
    metrics_ = dir_ + "/m.jsonl";
    write_text(metrics_, kOld);
  }
  static constexpr const char* kOld = "{\"event\": \"step\", \"step\": 0, \"from\": \"an earlier run\"}\n";
  std::string dir_, metrics_;
};

TEST_F(MetricsFile, AFailedTrainLeavesTheExistingFileWhole) {
  const JobResult r = run_shell(pipedream_binary() + " " + kTrain + " --minibatches 20 --log-every 1 --lr 1e30 --metrics " +
                                metrics_ + " < /dev/null");
  ASSERT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("nan"), std::string::npos) << r.output;
  EXPECT_EQ(read_all(metrics_), kOld);
  EXPECT_TRUE(fs::exists(metrics_ + ".partial")) << "the failed run's own log is kept beside it";
}

TEST_F(MetricsFile, AFailedRunLeavesTheExistingFileWhole) {
  write_text(dir_ + "/plan.json", kPlan);
  const JobResult r = run_shell(pipedream_binary() + " run --plan " + dir_ + "/plan.json" + kModel +
                                " --threads-per-worker 1 --minibatches 20 --log-every 1 --lr 1e30 --metrics " +
                                metrics_ + " < /dev/null");
  ASSERT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("diverged"), std::string::npos) << r.output;
  EXPECT_EQ(read_all(metrics_), kOld) << r.output;
}

TEST_F(MetricsFile, AKilledTrainLeavesTheExistingFileWhole) {
  const std::string cmd = pipedream_binary() + " " + kTrain + " --minibatches 1000000 --log-every 1 --metrics " +
                          metrics_ + " < /dev/null > " + dir_ + "/log.txt 2>&1";
  const pid_t job = fork();
  ASSERT_GE(job, 0);
  if (job == 0) {
    execl("/bin/sh", "sh", "-c", ("exec " + cmd).c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  // Until the run has logged steps (to the partial file).
  for (int i = 0; i < 600 && step_losses(metrics_ + ".partial").size() < 3; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_GE(step_losses(metrics_ + ".partial").size(), 3u) << read_all(dir_ + "/log.txt");
  kill(job, SIGTERM);  // train stops before its next step (Interrupted, exit 130)
  int status = 0;
  waitpid(job, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 130) << status;
  EXPECT_EQ(read_all(metrics_), kOld);
}

TEST_F(MetricsFile, AFinishedTrainReplacesIt) {
  const JobResult r = run_shell(pipedream_binary() + " " + kTrain + " --minibatches 3 --log-every 1 --no-eval --metrics " +
                                metrics_ + " < /dev/null");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(step_losses(metrics_).size(), 3u) << read_all(metrics_);
  EXPECT_FALSE(fs::exists(metrics_ + ".partial"));
}

}  // namespace
}  // namespace pd::testing
