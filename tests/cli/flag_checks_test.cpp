// Command-line values that used to hang, exit 1 or be silently accepted by
// `pipedream`: out-of-range and empty values, and flags that do nothing in
// their context. Each now exits 2 naming the flag, before any work; the
// valid neighbours of each case still run (exit 0).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/integration/run_job.h"

namespace pd::testing {
namespace {

namespace fs = std::filesystem;

const std::string kDirToken = "{dir}";

// Two layers, planned on two workers (written by `plan` in the fixture).
const char* kProfile = R"({"format": "pipedream-profile/1", "model": "model-a", "batch_size": 4, "nodes": [
  {"id": 0, "name": "fc1", "forward_ms": 1, "backward_ms": 2, "output_bytes": 8, "activation_bytes": 8,
   "parameter_bytes": 4},
  {"id": 1, "name": "fc2", "forward_ms": 1, "backward_ms": 2, "output_bytes": 8, "activation_bytes": 8,
   "parameter_bytes": 4}], "edges": [[0, 1]]})";
// The mlp with hidden=24, depth=3 has 8 layers: one stage holds them all.
const char* kMlpPlan = R"({"format": "pipedream-plan/1", "config": "1", "stages": [
  {"index": 0, "layers": [0, 7], "replicas": 1, "ranks": [0]}]})";
// Two stages on a topology of one worker.
const char* kMlpPlanShortTopology = R"({"format": "pipedream-plan/1", "config": "1-1",
  "topology": {"levels": [{"count": 1, "bandwidth_GBps": 1}]}, "stages": [
  {"index": 0, "layers": [0, 3], "replicas": 1, "ranks": [0]},
  {"index": 1, "layers": [4, 7], "replicas": 1, "ranks": [1]}]})";

const std::string kTrain = "train --model mlp --model-options hidden=24,depth=3 --data synthetic --threads 1 "
                           "--minibatches 1 --no-eval";
const std::string kMlpRunArgs = " --model mlp --model-options hidden=24,depth=3 --data synthetic "
                                "--threads-per-worker 1";
const std::string kRun = "run --plan {dir}/mlp_plan.json" + kMlpRunArgs + " --minibatches 2";
const std::string kPlan = "plan --profile {dir}/profile.json";
const std::string kSimulate = "simulate --plan {dir}/plan.json";
const std::string kSchedule = "schedule --plan {dir}/plan.json --worker 0";
const std::string kProfileCommand = "profile --model mlp --batch 2 --threads 1 --warmup 0 --iters 1 --min-time 0";

class FlagChecks : public ::testing::TestWithParam<std::tuple<std::string, std::string, std::string>> {
 protected:
  // Per process: ctest runs each case as its own process, in parallel.
  static fs::path dir() { return fs::temp_directory_path() / ("pd_cli_flag_checks_" + std::to_string(::getpid())); }

  static void SetUpTestSuite() {
    const fs::path d = dir();
    fs::remove_all(d);
    fs::create_directories(d / "folder");
    write_text((d / "profile.json").string(), kProfile);
    write_text((d / "mlp_plan.json").string(), kMlpPlan);
    write_text((d / "mlp_plan_short_topology.json").string(), kMlpPlanShortTopology);
    const JobResult plan = run_shell(pipedream_binary() + " plan --profile " + (d / "profile.json").string() +
                                     " --workers 2 --bandwidth 10 --straight -o " + (d / "plan.json").string());
    ASSERT_EQ(plan.exit_code, 0) << plan.output;
    // The same plan on a topology of one worker.
    nlohmann::json j = nlohmann::json::parse(std::ifstream(d / "plan.json"));
    ASSERT_EQ(j["stages"].size(), 2u) << j.dump();
    j["topology"]["levels"] = nlohmann::json::array({{{"count", 1}, {"bandwidth_GBps", 10}}});
    write_text((d / "plan_short_topology.json").string(), j.dump());
  }
  static void TearDownTestSuite() { fs::remove_all(dir()); }

  static std::string expand(std::string args) {
    for (size_t at; (at = args.find(kDirToken)) != std::string::npos;) args.replace(at, kDirToken.size(), dir().string());
    return args;
  }
  static JobResult pipedream(const std::string& args) { return run_shell(pipedream_binary() + " " + expand(args), 60); }
};

using FlagRefused = FlagChecks;
using FlagAccepted = FlagChecks;

TEST_P(FlagRefused, ExitsTwoNamingTheFlag) {
  const auto& [name, args, flag] = GetParam();
  const JobResult r = pipedream(args);
  EXPECT_EQ(r.exit_code, 2) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(flag), std::string::npos) << "expected '" << flag << "' in:\n" << r.output;
  // Refused up front: no training, replay or plan output, nothing written.
  for (const char* work : {"trained", "steps of plan", "time per minibatch", "# worker", "wrote "})
    EXPECT_EQ(r.output.find(work), std::string::npos) << r.output;
  EXPECT_TRUE(fs::is_empty(dir() / "folder")) << "something was written into the output folder";
}

// Each the valid neighbour of refused cases: the checks refuse no more than they should.
TEST_P(FlagAccepted, ExitsZero) {
  const auto& [name, args, expected] = GetParam();
  const JobResult r = pipedream(args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  EXPECT_NE(r.output.find(expected), std::string::npos) << "expected '" << expected << "' in:\n" << r.output;
}

using Case = std::tuple<std::string, std::string, std::string>;
std::string case_name(const ::testing::TestParamInfo<Case>& info) { return std::get<0>(info.param); }

INSTANTIATE_TEST_SUITE_P(
    OutOfRange, FlagRefused,
    ::testing::Values(
        // Used to hang (simulate) or grow to gigabytes (schedule).
        Case{"SimulateMinibatches2To63", kSimulate + " --minibatches 9223372036854775808", "--minibatches"},
        Case{"ScheduleMinibatches2To63", kSchedule + " --minibatches 9223372036854775808", "--minibatches"},
        // Used to be clamped to 2^63 - 1.
        Case{"ScheduleMinibatches1e20", kSchedule + " --minibatches 99999999999999999999", "--minibatches"},
        Case{"SimulateMinibatchesPastLimit", kSimulate + " --minibatches 20000001", "20000000"},
        Case{"ScheduleMinibatchesPastLimit", kSchedule + " --minibatches 200001", "200000"},
        Case{"ScheduleMinibatchesTimesMicrobatchesPastLimit",
             kSchedule + " --schedule gpipe --minibatches 50000 --microbatches 4", "--microbatches 4"},
        Case{"SimulateMinibatchesTimesWorkersPastLimit", kSimulate + " --minibatches 10000001", "on 2 workers"},
        Case{"SimulateMinibatchesTimesMicrobatchesPastLimit",
             kSimulate + " --schedule 1f1b-flush --minibatches 5000000 --microbatches 4", "--microbatches 4"},
        Case{"TrainSeedMinus1", kTrain + " --seed -1", "--seed"},
        Case{"TrainSeed2To64", kTrain + " --seed 18446744073709551616", "--seed"},
        Case{"TrainSeedEmpty", kTrain + " --seed ''", "--seed"},
        Case{"ProfileSeedMinus1", kProfileCommand + " --seed -1 -o {dir}/folder/p.json", "--seed"},
        Case{"RunSeedMinus1", kRun + " --seed -1", "--seed"},
        Case{"RunSeedEmpty", kRun + " --seed ''", "--seed"},
        Case{"BenchCommTimeoutMinus1", "bench-comm --timeout -1", "--timeout"},
        Case{"BenchCommTimeoutNan", "bench-comm --timeout nan", "--timeout"},
        Case{"BenchCommTimeoutInf", "bench-comm --timeout inf", "--timeout"},
        Case{"BenchCommTimeoutZero", "bench-comm --timeout 0", "--timeout"},
        Case{"PlanBandwidth1e308", kPlan + " --workers 2 --bandwidth 1e308", "--bandwidth"},
        Case{"PlanBandwidth2e9", kPlan + " --workers 2 --bandwidth 2e9", "--bandwidth"},
        Case{"PlanBandwidth1eMinus12", kPlan + " --workers 2 --bandwidth 1e-12", "--bandwidth"},
        Case{"PlanCompressionInf", kPlan + " --workers 2 --bandwidth 1 --activation-compression-ratio inf",
             "--activation-compression-ratio"},
        Case{"PlanCompressionZero", kPlan + " --workers 2 --bandwidth 1 --activation-compression-ratio 0",
             "--activation-compression-ratio"},
        Case{"PlanMaxAntichainStatesMinus1", kPlan + " --workers 2 --bandwidth 1 --max-antichain-states -1",
             "--max-antichain-states"},
        Case{"PlanWorkersHex", kPlan + " --workers 0x10 --bandwidth 1", "--workers"},
        Case{"PlanWorkersZero", kPlan + " --workers 0 --bandwidth 1", "--workers"},
        Case{"SimulateCoresInf", kSimulate + " --cores inf", "--cores"},
        Case{"SimulateBatchSizeFraction", kSimulate + " --batch-size 1.5", "--batch-size"},
        Case{"RunFlushMicrobatchesZero", kRun + " --schedule 1f1b-flush --microbatches 0", "--microbatches"},
        Case{"RunEvalBatchMinus1", kRun + " --eval-batch -1", "--eval-batch"},
        Case{"RunEpochs2To62", "run --plan {dir}/mlp_plan.json" + kMlpRunArgs + " --epochs 4611686018427387904",
             "--epochs"},
        Case{"ProfileItersPastLimit", kProfileCommand + " --iters 2000000 -o {dir}/folder/p.json", "--iters"},
        Case{"ProfileMinTimeDay", kProfileCommand + " --min-time 86400 -o {dir}/folder/p.json", "--min-time"},
        Case{"ProfileMicrobatchesZero", kProfileCommand + " --microbatches 2,0 -o {dir}/folder/p.json",
             "--microbatches"},
        Case{"BenchCommP2pSizesZero", "bench-comm --p2p-sizes 0", "--p2p-sizes"},
        Case{"BenchCommAllreduceSizesZero", "bench-comm --allreduce-sizes 1MB,0", "--allreduce-sizes"},
        Case{"BenchCommP2pSizesTerabyte", "bench-comm --p2p-sizes 1TB", "--p2p-sizes"},
        Case{"BenchCommLatencyItersZero", "bench-comm --latency-iters 0", "--latency-iters"}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Empty, FlagRefused,
    ::testing::Values(Case{"PlanMemory", kPlan + " --workers 2 --bandwidth 1 --memory ''", "--memory"},
                      Case{"SimulateSchedule", kSimulate + " --schedule ''", "--schedule"},
                      Case{"RunSchedule", kRun + " --schedule ''", "--schedule"},
                      Case{"BenchCommWorkerMemory", "bench-comm --worker-memory ''", "--worker-memory"},
                      Case{"ModelsModel", "models --model ''", "--model"},
                      Case{"TrainDataDir", kTrain + " --data-dir ''", "--data-dir"},
                      Case{"RunPlan", "run --plan '' --model mlp --data synthetic", "--plan"}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    IgnoredInContext, FlagRefused,
    ::testing::Values(
        Case{"TrainUnknownOptimizer", kTrain + " --optimizer rmsprop", "--optimizer rmsprop: use sgd, adam or adamw"},
        Case{"RunUnknownLrSchedule", kRun + " --lr-schedule linear", "--lr-schedule linear: use constant, step or cosine"},
        Case{"ProfileUnknownOptimizer", kProfileCommand + " --optimizer lion", "--optimizer lion: use sgd, adam or adamw"},
        Case{"TrainUnknownPrecision", kTrain + " --precision fp16", "--precision fp16: use fp32 or bf16"},
        Case{"RunUnknownPrecision", kRun + " --precision half", "--precision half: use fp32 or bf16"},
        Case{"ProfileUnknownPrecision", kProfileCommand + " --precision BF16", "--precision BF16: use fp32 or bf16"},
        Case{"TrainBeta1WithSgd", kTrain + " --beta1 0.8", "--beta1"},
        Case{"TrainBeta2WithSgd", kTrain + " --optimizer sgd --beta2 0.9", "--beta2"},
        Case{"TrainLrStepSizeWithCosine", kTrain + " --lr-schedule cosine --lr-step-size 5", "--lr-step-size"},
        Case{"TrainLrGammaWithConstant", kTrain + " --lr-gamma 0.5", "--lr-gamma"},
        Case{"TrainMinLrWithConstant", kTrain + " --min-lr 0.001", "--min-lr"},
        Case{"RunBeta1WithSgd", kRun + " --beta1 0.8", "--beta1"},
        Case{"RunMinLrWithStep", kRun + " --lr-schedule step --lr-step-size 1 --min-lr 0.001", "--min-lr"},
        Case{"RunEvalEveryWithNoEval", kRun + " --no-eval --eval-every 1", "--eval-every"},
        Case{"RunEvalBatchWithNoEval", kRun + " --no-eval --eval-batch 10", "--eval-batch"},
        Case{"RunSvgMinibatchesWithoutSvg", kRun + " --svg-minibatches 2", "--svg-minibatches"},
        Case{"RunPlanOutWithPlanFile", kRun + " --plan-out {dir}/folder/x.json", "--plan-out"},
        Case{"SimulateSvgMinibatchesWithoutSvg", kSimulate + " --svg-minibatches 2", "--svg-minibatches"},
        Case{"SimulateWeightGradShareWith1f1bRr", kSimulate + " --weight-grad-share 0.3", "--weight-grad-share"},
        Case{"ModelsModelOptionsWithoutModel", "models --model-options width=0.5", "--model-options"}),
    case_name);

// simulate, schedule and run share one check of the plan's topology.
INSTANTIATE_TEST_SUITE_P(
    TopologyShorterThanStages, FlagRefused,
    ::testing::Values(
        Case{"Simulate", "simulate --plan {dir}/plan_short_topology.json", "topology has 1 workers but its stages use 2"},
        Case{"Schedule", "schedule --plan {dir}/plan_short_topology.json --worker 0",
             "topology has 1 workers but its stages use 2"},
        Case{"Run", "run --plan {dir}/mlp_plan_short_topology.json" + kMlpRunArgs + " --minibatches 2",
             "topology has 1 workers but its stages use 2"}),
    case_name);

INSTANTIATE_TEST_SUITE_P(
    Valid, FlagAccepted,
    ::testing::Values(
        Case{"ScheduleMinibatches", kSchedule + " --minibatches 3", "3 minibatches"},
        Case{"ScheduleMinibatchesDecimalNotOctal", kSchedule + " --minibatches 010", "10 minibatches"},
        Case{"SimulateMinibatches", kSimulate + " --minibatches 10", "time per minibatch"},
        Case{"SimulateZbH1WeightGradShare", kSimulate + " --schedule zb-h1 --weight-grad-share 0.3 --minibatches 4",
             "throughput"},
        Case{"SimulateSvgMinibatchesWithSvg",
             kSimulate + " --minibatches 6 --svg {dir}/t.svg --svg-minibatches 2", "timeline written"},
        Case{"SimulateCores", kSimulate + " --cores 1.5 --minibatches 4", "share 1.5 cores"},
        Case{"PlanBandwidthLimits", kPlan + " --workers 2 --bandwidth 1e9 --memory 1GB", "config"},
        Case{"PlanCompression", kPlan + " --workers 2 --bandwidth 1 --cost-model pipedream "
                                        "--activation-compression-ratio 2 --max-antichain-states 100",
             "config"},
        Case{"ModelsModelOptions", "models --model mlp --model-options hidden=24", "mlp"},
        Case{"TrainAdamBetasLargestSeed",
             kTrain + " --optimizer adam --beta1 0.8 --beta2 0.99 --seed 18446744073709551615", "trained 1 steps"},
        Case{"TrainStepSchedule", kTrain + " --lr-schedule step --lr-step-size 1 --lr-gamma 0.5", "trained 1 steps"},
        Case{"TrainCosineSchedule", kTrain + " --lr-schedule cosine --min-lr 0.0001", "trained 1 steps"},
        Case{"TrainBf16", kTrain + " --precision bf16", "trained 1 steps"},
        Case{"RunFlushMicrobatches", kRun + " --schedule 1f1b-flush --microbatches 1 --seed 7", "steps"},
        Case{"RunEvalEvery", kRun + " --eval-every 1 --eval-batch 10", "steps"},
        // The workers started under mpirun get --plan FILE without --plan-out, which a plan file refuses.
        Case{"RunPlanAutoPlanOutRelaunched",
             "run --plan auto --workers 2 --straight --plan-out {dir}/auto_plan.json --no-eval" + kMlpRunArgs +
                 " --minibatches 2",
             "trained 2 steps on 2 workers"}),
    case_name);

// Every option of every subcommand, as its --help lists it: out-of-range,
// non-finite and empty values all exit 2 naming the flag, so that a flag
// added later is checked too (by its type's default rule).
class EveryOption : public ::testing::TestWithParam<std::string> {};

TEST_P(EveryOption, RefusesOutOfRangeNonFiniteAndEmptyValues) {
  const std::string command = GetParam();
  const JobResult help = run_shell(pipedream_binary() + " " + command + " --help", 60);
  ASSERT_EQ(help.exit_code, 0) << help.output;
  const std::regex option_line(R"(^\s+(?:-\w,)?(--[a-z0-9-]+) (INT|UINT|FLOAT|TEXT)\b)");
  int options = 0;
  std::istringstream lines(help.output);
  for (std::string line; std::getline(lines, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, option_line)) continue;
    ++options;
    const std::string flag = m[1], type = m[2];
    std::vector<std::string> bad = {"''"};
    if (type == "INT" || type == "UINT") bad.insert(bad.end(), {"99999999999999999999", "-1", "1.5"});
    if (type == "FLOAT") bad.insert(bad.end(), {"nan", "inf", "-1", "1e999"});
    for (const std::string& value : bad) {
      const JobResult r = run_shell(pipedream_binary() + " " + command + " " + flag + " " + value, 60);
      EXPECT_EQ(r.exit_code, 2) << command << " " << flag << " " << value << "\n" << r.output;
      EXPECT_NE(r.output.find(flag), std::string::npos) << command << " " << flag << " " << value << "\n" << r.output;
    }
  }
  EXPECT_GT(options, 0) << help.output;
}

INSTANTIATE_TEST_SUITE_P(Commands, EveryOption,
                         ::testing::Values("models", "train", "profile", "plan", "simulate", "schedule", "run",
                                           "bench-comm", "export"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string name = info.param;
                           name.erase(std::remove(name.begin(), name.end(), '-'), name.end());
                           return name;
                         });

// bench-comm -o names a folder: refused before MPI starts, no DIR.tmp left.
TEST(BenchCommOutput, FolderIsRefusedAndLeavesNothing) {
  const std::string d = scratch_dir("bench_comm_output");
  fs::create_directories(d + "/folder_out");
  const JobResult folder = run_shell(pipedream_binary() + " bench-comm -o " + d + "/folder_out", 60);
  EXPECT_EQ(folder.exit_code, 2) << folder.output;
  EXPECT_NE(folder.output.find("-o"), std::string::npos) << folder.output;
  EXPECT_NE(folder.output.find("is a folder"), std::string::npos) << folder.output;
  EXPECT_FALSE(fs::exists(d + "/folder_out.tmp"));
  const JobResult missing = run_shell(pipedream_binary() + " bench-comm -o " + d + "/no/such/topology.json", 60);
  EXPECT_EQ(missing.exit_code, 2) << missing.output;
  EXPECT_NE(missing.output.find("does not exist"), std::string::npos) << missing.output;
  fs::remove_all(d);
}

}  // namespace
}  // namespace pd::testing
