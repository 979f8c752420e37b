// `--device cuda` through the command line, in every build: where the GPU
// cannot be used (CPU-only build, no GPU visible - CI), every command that
// takes it exits 2 before doing any work with a message naming what is
// missing; where a GPU is visible, the same commands run on it.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "../integration/run_job.h"
#include "core/safetensors.h"

#if defined(PIPEDREAM_HAVE_CUDA)
#include "core/cuda/backend.h"
#endif

namespace pd {
namespace {

// GPU commands may take longer than the integration tests' default limit.
testing::JobResult run(const std::string& args) { return testing::run_shell(args, 300); }

std::string bin(const std::string& name) { return std::string(PD_BINARY_DIR) + "/bin/" + name + " "; }

int visible_gpus() {
#if defined(PIPEDREAM_HAVE_CUDA)
  return cuda::visible_device_count();
#else
  return 0;
#endif
}

std::string scratch() {
  const auto d = std::filesystem::temp_directory_path() / "pipedream_cli_device_test";
  std::filesystem::create_directories(d);
  return d.string();
}

// A two-stage straight plan for cnn (10 layers).
std::string cnn_plan() {
  const std::string path = scratch() + "/plan.json";
  FILE* f = std::fopen(path.c_str(), "w");
  std::fputs(R"({"format": "pipedream-plan/1", "schedule": "1f1b-rr", "config": "1-1",
    "stages": [{"index": 0, "layers": [0, 4], "replicas": 1, "ranks": [0]},
               {"index": 1, "layers": [5, 9], "replicas": 1, "ranks": [1]}]})",
             f);
  std::fclose(f);
  return path;
}

struct Command {
  std::string line;
};

std::vector<Command> device_commands() {
  const std::string out = scratch();
  return {
      {bin("pipedream") + "train --model cnn --data synthetic --minibatches 2 --batch 16 --no-eval --device cuda"},
      {bin("pipedream") + "profile --model cnn --batch 8 --iters 1 --warmup 0 --min-time 0 --device cuda -o " + out + "/p.json"},
      {bin("pipedream") + "run --plan " + cnn_plan() +
       " --model cnn --data synthetic --minibatches 2 --batch 16 --no-eval --reference --device cuda"},
      {bin("pipedream-bench") + "core --workloads cnn --warmup 0 --steps 1 --device cuda"},
  };
}

TEST(CliDevice, WithoutAUsableGpuEveryCommandExits2NamingWhatIsMissing) {
  if (visible_gpus() > 0) GTEST_SKIP() << "a GPU is visible: CliDevice.CommandsRunOnTheGpu covers this machine";
  for (const Command& c : device_commands()) {
    const testing::JobResult r = run(c.line);
    EXPECT_EQ(r.exit_code, 2) << c.line << "\n" << r.output;
    EXPECT_NE(r.output.find("--device cuda"), std::string::npos) << c.line << "\n" << r.output;
#if defined(PIPEDREAM_HAVE_CUDA)
    EXPECT_NE(r.output.find("no GPU is visible"), std::string::npos) << c.line << "\n" << r.output;
#else
    EXPECT_NE(r.output.find("built without CUDA"), std::string::npos) << c.line << "\n" << r.output;
#endif
  }
  // bench-comm checks the GPU before it asks for MPI, so no mpirun is needed here.
  const testing::JobResult r = run(bin("pipedream") + "bench-comm --transport nccl");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--transport nccl"), std::string::npos) << r.output;
}

TEST(CliDevice, RunRefusesNcclWithoutAGpuDevice) {
  const testing::JobResult r = run(bin("pipedream") + "run --plan " + cnn_plan() +
                       " --model cnn --data synthetic --minibatches 2 --reference --transport nccl");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--transport nccl"), std::string::npos) << r.output;
}

TEST(CliDevice, CommandsRunOnTheGpu) {
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU visible (cudaGetDeviceCount reports none)";
  for (const Command& c : device_commands()) {
    const testing::JobResult r = run(c.line);
    EXPECT_EQ(r.exit_code, 0) << c.line << "\n" << r.output;
  }
}

// Gradient accumulation on the GPU: `train --microbatches 2` on cuda ends at
// the CPU's weights within FP32 tolerance (cuDNN and cuBLAS sum in another
// order; atol 1e-4, rtol 1e-3 as the layer tests).
// Also with --clip-grad-norm small enough to clip every step: the norm's
// sums of squares come from the GPU's own reduction (sum_squares_multi).
TEST(CliDevice, TrainWithMicrobatchesOnTheGpuEndsAtTheCpusWeights) {
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU visible (cudaGetDeviceCount reports none)";
  const std::string d = scratch();
  for (const std::string clip : {"", " --clip-grad-norm 0.5"}) {
  SCOPED_TRACE(clip.empty() ? "no clipping" : clip);
  for (const std::string dev : {"cpu", "cuda"}) {
    const testing::JobResult r = run(bin("pipedream") + "train --model cnn --data synthetic --minibatches 3 --batch 16 "
                                     "--microbatches 2 --no-eval --device " + dev + clip + " --save " + d + "/mb_" +
                                     dev + ".safetensors");
    ASSERT_EQ(r.exit_code, 0) << dev << "\n" << r.output;
  }
  const NamedTensors cpu = load_safetensors(d + "/mb_cpu.safetensors"), gpu = load_safetensors(d + "/mb_cuda.safetensors");
  ASSERT_EQ(cpu.size(), gpu.size());
  for (size_t i = 0; i < cpu.size(); ++i) {
    ASSERT_EQ(cpu[i].first, gpu[i].first);
    const std::vector<float> a = cpu[i].second.to_floats(), b = gpu[i].second.to_floats();
    ASSERT_EQ(a.size(), b.size());
    int bad = 0;
    for (size_t k = 0; k < a.size(); ++k) bad += !(std::fabs(a[k] - b[k]) <= 1e-4 + 1e-3 * std::fabs(a[k]));
    EXPECT_EQ(bad, 0) << cpu[i].first;
  }
  }
}

// Activation recomputation on the GPU (docs/design.md §6): a model with
// dropout and BatchNorm run with its stages recomputing every layer ends
// at the same bits as without, weights and running statistics, under
// 1f1b-rr and zb-h1, in FP32 and bf16 (deterministic convolutions: the
// two runs must run the same kernels).
TEST(CliDevice, RecomputationChangesNoBitOnTheGpu) {
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU visible (cudaGetDeviceCount reports none)";
  const std::string d = scratch();
  {
    FILE* f = std::fopen((d + "/bn_dropout.json").c_str(), "w");
    std::fputs(R"({"name": "bn-dropout", "input": {"shape": [3, 8, 8]}, "classes": 4, "layers": [
      {"type": "conv2d", "name": "conv1", "out_channels": 8, "kernel": 3, "padding": 1},
      {"type": "batchnorm2d", "name": "bn1"}, {"type": "relu", "name": "relu1"},
      {"type": "dropout", "name": "drop1", "p": 0.3},
      {"type": "conv2d", "name": "conv2", "out_channels": 8, "kernel": 3, "padding": 1},
      {"type": "batchnorm2d", "name": "bn2"}, {"type": "relu", "name": "relu2"},
      {"type": "flatten", "name": "flatten"}, {"type": "linear", "name": "fc1", "out_features": 16},
      {"type": "relu", "name": "relu3"}, {"type": "dropout", "name": "drop2", "p": 0.5},
      {"type": "linear", "name": "fc2", "out_features": 4}]})",
               f);
    std::fclose(f);
  }
  for (const std::string recompute : {"", "\"recompute_layers\": [0, 1, 2, 3, 4, 5], "}) {
    FILE* f = std::fopen((d + (recompute.empty() ? "/plain.json" : "/recompute.json")).c_str(), "w");
    std::fputs((R"({"format": "pipedream-plan/1", "config": "1-1", "stages": [{"index": 0, "layers": [0, 5], )" +
                recompute + R"("replicas": 1, "ranks": [0]}, {"index": 1, "layers": [6, 11], "replicas": 1, "ranks": [1]}]})")
                   .c_str(),
               f);
    std::fclose(f);
  }
  for (const std::string schedule : {"1f1b-rr", "zb-h1 --microbatches 4"})
    for (const std::string precision : {"fp32", "bf16"}) {
      SCOPED_TRACE(schedule + " " + precision);
      for (const std::string plan : {"plain", "recompute"}) {
        const testing::JobResult r =
            run(bin("pipedream") + "run --model " + d + "/bn_dropout.json --plan " + d + "/" + plan +
                ".json --data synthetic --minibatches 3 --batch 8 --no-eval --reference --device cuda --deterministic "
                "--schedule " + schedule + " --precision " + precision + " --save " + d + "/" + plan + ".safetensors");
        ASSERT_EQ(r.exit_code, 0) << r.output;
      }
      const NamedTensors a = load_safetensors(d + "/plain.safetensors"), b = load_safetensors(d + "/recompute.safetensors");
      ASSERT_EQ(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i) {
        ASSERT_EQ(a[i].first, b[i].first);
        EXPECT_EQ(a[i].second.to_floats(), b[i].second.to_floats()) << a[i].first;
      }
    }
}

}  // namespace
}  // namespace pd
