// `--device cuda` through the command line, in every build: where the GPU
// cannot be used (CPU-only build, no GPU visible - CI), every command that
// takes it exits 2 before doing any work with a message naming what is
// missing; where a GPU is visible, the same commands run on it.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#if defined(PIPEDREAM_HAVE_CUDA)
#include "core/cuda/backend.h"
#endif

namespace pd {
namespace {

struct Result {
  int code = -1;
  std::string output;
};

Result run(const std::string& args) {
  const std::string cmd = "timeout -s KILL 300 " + args + " 2>&1";
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.output.append(buf.data(), n);
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

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
      {bin("pipedream") + "profile --model cnn --batch 8 --iters 1 --warmup 0 --device cuda -o " + out + "/p.json"},
      {bin("pipedream") + "run --plan " + cnn_plan() +
       " --model cnn --data synthetic --minibatches 2 --batch 16 --no-eval --reference --device cuda"},
      {bin("pipedream-bench") + "core --workloads cnn --warmup 0 --steps 1 --device cuda"},
  };
}

TEST(CliDevice, WithoutAUsableGpuEveryCommandExits2NamingWhatIsMissing) {
  if (visible_gpus() > 0) GTEST_SKIP() << "a GPU is visible: CliDevice.CommandsRunOnTheGpu covers this machine";
  for (const Command& c : device_commands()) {
    const Result r = run(c.line);
    EXPECT_EQ(r.code, 2) << c.line << "\n" << r.output;
    EXPECT_NE(r.output.find("--device cuda"), std::string::npos) << c.line << "\n" << r.output;
#if defined(PIPEDREAM_HAVE_CUDA)
    EXPECT_NE(r.output.find("no GPU is visible"), std::string::npos) << c.line << "\n" << r.output;
#else
    EXPECT_NE(r.output.find("built without CUDA"), std::string::npos) << c.line << "\n" << r.output;
#endif
  }
  // bench-comm checks the GPU before it asks for MPI, so no mpirun is needed here.
  const Result r = run(bin("pipedream") + "bench-comm --transport nccl");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--transport nccl"), std::string::npos) << r.output;
}

TEST(CliDevice, RunRefusesNcclWithoutAGpuDevice) {
  const Result r = run(bin("pipedream") + "run --plan " + cnn_plan() +
                       " --model cnn --data synthetic --minibatches 2 --reference --transport nccl");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--transport nccl"), std::string::npos) << r.output;
}

TEST(CliDevice, CommandsRunOnTheGpu) {
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU visible (cudaGetDeviceCount reports none)";
  for (const Command& c : device_commands()) {
    const Result r = run(c.line);
    EXPECT_EQ(r.code, 0) << c.line << "\n" << r.output;
  }
}

}  // namespace
}  // namespace pd
