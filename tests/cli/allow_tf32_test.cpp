// --allow-tf32 on every command that computes (train, profile, run,
// evaluate, predict, pipedream-bench core): refused with --device cpu (exit
// 2, naming the flag, before any work), and on a GPU handed to the CUDA
// plugin's set_allow_tf32 - on by the flag, off without it. The GPU side
// runs on any machine of a CUDA build: the fake CUDA plugin
// (tests/gpu/fake_nccl/fake_cuda_plugin.cpp) prints the switches it is
// given and then fails the first kernel, which these tests do not need.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/run_job.h"

namespace pd::testing {
namespace {

const std::string kMlp = " --model mlp --model-options hidden=24,depth=3";
const std::string kPlan1 = R"({"format": "pipedream-plan/1", "config": "1", "stages": [
  {"index": 0, "layers": [0, 7], "replicas": 1, "ranks": [0]}]})";

std::string bench_binary() { return std::string(PD_BINARY_DIR) + "/bin/pipedream-bench"; }

// Each computing command, in one line without --device; {dir} is a scratch
// folder holding plan.json and weights.safetensors.
struct Command {
  std::string name, line;
};

std::vector<Command> commands(const std::string& dir) {
  const std::string pd = pipedream_binary() + " ";
  return {
      {"train", pd + "train" + kMlp + " --data synthetic --threads 1 --minibatches 1 --no-eval"},
      {"profile", pd + "profile" + kMlp + " --batch 2 --threads 1 --warmup 0 --iters 1 --min-time 0 -o " + dir +
                      "/profile.json"},
      {"run", pd + "run --plan " + dir + "/plan.json" + kMlp + " --data synthetic --threads-per-worker 1 "
                                                               "--minibatches 1 --no-eval"},
      {"evaluate", pd + "evaluate" + kMlp + " --data synthetic --samples 4 --threads 1 --weights " + dir +
                       "/weights.safetensors"},
      {"predict", pd + "predict" + kMlp + " --data synthetic --samples 4 --threads 1 --weights " + dir +
                      "/weights.safetensors -o " + dir + "/predictions.csv"},
      {"bench core", bench_binary() + " core --workloads mlp --batch 2 --warmup 0 --steps 1"},
  };
}

class AllowTf32 : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = scratch_dir("allow_tf32");
    write_text(dir_ + "/plan.json", kPlan1);
    const JobResult w = run_shell(pipedream_binary() + " train" + kMlp +
                                  " --data synthetic --threads 1 --minibatches 1 --no-eval --save " + dir_ +
                                  "/weights.safetensors");
    ASSERT_EQ(w.exit_code, 0) << w.output;
  }
  static std::string dir_;
};
std::string AllowTf32::dir_;

TEST_F(AllowTf32, RefusedOnTheCpuNamingTheFlag) {
  for (const Command& c : commands(dir_)) {
    const JobResult r = run_shell(c.line + " --device cpu --allow-tf32", 60);
    EXPECT_EQ(r.exit_code, 2) << c.name << "\n" << r.output;
    EXPECT_NE(r.output.find("--allow-tf32 applies to CUDA only"), std::string::npos) << c.name << "\n" << r.output;
    for (const char* work : {"trained", "wrote ", "\"suite\""})
      EXPECT_EQ(r.output.find(work), std::string::npos) << c.name << " did work before refusing:\n" << r.output;
  }
}

#ifdef PD_FAKE_CUDA_PLUGIN
TEST_F(AllowTf32, ReachesTheCudaPluginOnlyWhenGiven) {
  const std::string env = std::string("env PIPEDREAM_CUDA_PLUGIN=") + PD_FAKE_CUDA_PLUGIN + " PD_FAKE_CUDA_TRACE=1 ";
  for (const Command& c : commands(dir_)) {
    const JobResult on = run_shell(env + c.line + " --device cuda --allow-tf32", 60);
    EXPECT_NE(on.output.find("fake CUDA plugin: set_allow_tf32(1)"), std::string::npos) << c.name << "\n"
                                                                                          << on.output;
    EXPECT_EQ(on.output.find("set_allow_tf32(0)"), std::string::npos) << c.name << "\n" << on.output;
    const JobResult off = run_shell(env + c.line + " --device cuda", 60);
    EXPECT_NE(off.output.find("fake CUDA plugin: set_allow_tf32(0)"), std::string::npos) << c.name << "\n"
                                                                                           << off.output;
    EXPECT_EQ(off.output.find("set_allow_tf32(1)"), std::string::npos) << c.name << "\n" << off.output;
  }
}
#else
TEST_F(AllowTf32, ReachesTheCudaPluginOnlyWhenGiven) { GTEST_SKIP() << "a build without CUDA has no fake plugin"; }
#endif

}  // namespace
}  // namespace pd::testing
