// Under mpirun the last stage's first replica writes the metrics; the
// stage's other replicas send it their losses, so a replicated last stage
// logs every step, with the losses the single-process reference logs.
// (Before, a flush schedule logged no step at all there, and 1f1b-rr one
// step in r.)
#include <gtest/gtest.h>

#include "run_job.h"

namespace pd::testing {
namespace {

constexpr const char* kPlan22 = R"({"format": "pipedream-plan/1", "config": "2-2", "stages": [
  {"index": 0, "layers": [0, 3], "replicas": 2, "ranks": [0, 1]},
  {"index": 1, "layers": [4, 9], "replicas": 2, "ranks": [2, 3]}]})";
constexpr const char* kPlan13 = R"({"format": "pipedream-plan/1", "config": "1-3", "stages": [
  {"index": 0, "layers": [0, 3], "replicas": 1, "ranks": [0]},
  {"index": 1, "layers": [4, 9], "replicas": 3, "ranks": [1, 2, 3]}]})";

RunFiles run(const std::string& dir, const std::string& tag, const std::string& plan, const std::string& args,
             bool reference) {
  RunFiles f{dir + "/" + tag + ".safetensors", dir + "/" + tag + ".jsonl"};
  const std::string cmd = " run --plan " + plan +
                          " --model cnn --data synthetic --seed 2 --no-eval --log-every 1 --threads-per-worker 1"
                          " --timeout 60 --save " + f.save + " --metrics " + f.metrics + args;
  JobResult r = reference ? run_shell(pipedream_binary() + cmd + " --reference")
                          : run_shell(mpirun(4) + pipedream_binary() + cmd);
  EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
  return f;
}

TEST(ReplicatedLastStage, LogsEveryStepWithTheReferencesLosses) {
  const std::string dir = scratch_dir("replicated_losses");
  write_text(dir + "/22.json", kPlan22);
  write_text(dir + "/13.json", kPlan13);
  struct Case {
    std::string tag, plan, args;
    size_t steps;
  };
  const std::vector<Case> cases{
      {"flush_22", dir + "/22.json", " --schedule 1f1b-flush --batch 16 --microbatches 4 --minibatches 5", 5},
      {"gpipe_13", dir + "/13.json", " --schedule gpipe --batch 12 --microbatches 6 --minibatches 4", 4},
      {"rr_13", dir + "/13.json", " --schedule 1f1b-rr --batch 8 --minibatches 12", 12}};
  for (const Case& c : cases) {
    const RunFiles mpi = run(dir, c.tag + "_mpi", c.plan, c.args, false);
    const RunFiles ref = run(dir, c.tag + "_ref", c.plan, c.args, true);
    expect_same_bits(mpi, ref, c.tag + ": mpirun vs --reference", c.steps);
  }
}

}  // namespace
}  // namespace pd::testing
