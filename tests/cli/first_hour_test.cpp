// A new user's first hour with a language model (issue 42): what misled
// them, each as the command they ran. Every command `plan` recommends runs
// as pasted; --straight, the baselines and the memory advice say what is
// true; a plan records the schedule it was chosen for and `run` uses it;
// misspelt keys are refused; interrupted checkpoints are cleaned up; a
// resumed run says when its learning rate jumps and continues its clock;
// Gemm imports in every form.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tests/integration/run_job.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string file_text(const std::string& path) {
  std::ifstream f(path);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// A chain profile of `layers` layers: each 1 ms forward, 2 ms backward,
// 1 MB of parameters and activations, 64 KB to the next.
json chain_profile(int layers, const std::string& model = "chain", int batch = 8) {
  json nodes = json::array(), edges = json::array();
  for (int i = 0; i < layers; ++i) {
    nodes.push_back({{"id", i}, {"name", cat("layer", i)}, {"forward_ms", 1}, {"backward_ms", 2},
                     {"output_bytes", 65536}, {"activation_bytes", 1000000}, {"parameter_bytes", 1000000}});
    if (i > 0) edges.push_back({i - 1, i});
  }
  return {{"format", "pipedream-profile/1"}, {"model", model}, {"batch_size", batch}, {"nodes", nodes}, {"edges", edges}};
}

// The lines of `output` that are `pipedream ...` commands (after "fits: " or indented), as printed.
std::vector<std::string> printed_commands(const std::string& output, const std::string& command) {
  std::vector<std::string> out;
  std::istringstream in(output);
  std::string line;
  const std::string start = "pipedream " + command + " ";
  while (std::getline(in, line)) {
    const size_t at = line.find(start);
    if (at == std::string::npos) continue;
    const std::string before = line.substr(0, at);
    if (before.find_first_not_of(' ') == std::string::npos || before.find("fits: ") != std::string::npos)
      out.push_back(line.substr(at));
  }
  return out;
}

class FirstHour : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = scratch_dir("first_hour"); }
  void TearDown() override { fs::remove_all(dir_); }
  JobResult pipedream(const std::string& args, int timeout_s = 180) {
    // In the test's folder, where printed commands name their files (args hold no double quotes).
    return run_shell("sh -c \"cd " + dir_ + " && exec " + pipedream_binary() + " " + args + "\"", timeout_s);
  }
  // A printed command, run as pasted (its `pipedream` is this build's), in the test's folder.
  JobResult pasted(const std::string& command, const std::string& then = "") {
    return pipedream(command.substr(std::string("pipedream ").size()) + then);
  }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

// Must show 3: every command that `plan --schedule auto` and a --memory
// failure print runs as pasted; the run of the recommended plan uses the
// schedule, microbatches and batch the plan records and compares with its
// prediction.
TEST_F(FirstHour, EveryCommandPlanRecommendsRunsAsPasted) {
  const JobResult profile = pipedream("profile --model mlp --batch 8 --iters 2 --warmup 1 --threads 1 -o prof.json");
  ASSERT_EQ(profile.exit_code, 0) << profile.output;

  // A 1f1b-rr plan that does not fit: each "fits:" command plans.
  const JobResult small = pipedream("plan --profile prof.json --workers 2 --bandwidth 10 --memory 100KB -o rr.json");
  ASSERT_EQ(small.exit_code, 2) << small.output;
  const std::vector<std::string> rr_fits = printed_commands(small.output, "plan");
  ASSERT_FALSE(rr_fits.empty()) << small.output;
  for (const std::string& c : rr_fits) {
    const JobResult r = pasted(c);
    EXPECT_EQ(r.exit_code, 0) << c << "\n" << r.output;
  }
  // Both figures of the advice are true: the one that fits (above), and the one that does not.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(small.output, m, std::regex("--memory ([0-9]+) fits, ([0-9]+) does not"))) << small.output;
  const JobResult below = pipedream("plan --profile prof.json --workers 2 --bandwidth 10 --memory " + m[2].str());
  EXPECT_EQ(below.exit_code, 2) << below.output;

  // --schedule auto under a limit nothing fits: its "fits:" command, then the run and replay that one recommends.
  const JobResult none = pipedream("plan --profile prof.json --workers 2 --bandwidth 10 --schedule auto --memory 100KB "
                                   "-o auto.json");
  ASSERT_EQ(none.exit_code, 2) << none.output;
  // With recomputation and without (each its own least memory), and perhaps more workers: each plans.
  const std::vector<std::string> auto_fits = printed_commands(none.output, "plan");
  ASSERT_GE(auto_fits.size(), 2u) << none.output;
  for (size_t i = 1; i < auto_fits.size(); ++i) {
    const JobResult r = pasted(auto_fits[i]);
    EXPECT_EQ(r.exit_code, 0) << auto_fits[i] << "\n" << r.output;
  }
  const JobResult chosen = pasted(auto_fits[0]);
  ASSERT_EQ(chosen.exit_code, 0) << auto_fits[0] << "\n" << chosen.output;
  const json plan = json::parse(file_text(path("auto.json")));
  ASSERT_NE(plan.value("schedule", ""), "1f1b-rr") << chosen.output;  // at the least memory, a flush family fits
  EXPECT_EQ(plan.value("batch", 0), 8);
  ASSERT_GT(plan.value("microbatches", 0), 0);
  EXPECT_EQ(8 % plan["microbatches"].get<int>(), 0) << "the microbatches must split the batch";
  // The memory printed and recorded is the chosen schedule's: within the limit.
  const uint64_t limit = std::stoull(auto_fits[0].substr(auto_fits[0].find("--memory ") + 9));
  for (const json& st : plan["stages"]) EXPECT_LE(st["memory_bytes"].get<uint64_t>(), limit);

  const std::vector<std::string> runs = printed_commands(chosen.output, "run");
  const std::vector<std::string> replays = printed_commands(chosen.output, "simulate");
  ASSERT_EQ(runs.size(), 1u) << chosen.output;
  ASSERT_EQ(replays.size(), 1u) << chosen.output;
  // The data and the length are the user's to choose; the rest is as printed.
  const JobResult run = pasted(runs[0], " --data synthetic --minibatches 12 --no-eval --threads-per-worker 1");
  ASSERT_EQ(run.exit_code, 0) << runs[0] << "\n" << run.output;
  EXPECT_NE(run.output.find("(replay, steady state)"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("not compared with the plan's prediction"), std::string::npos) << run.output;
  const JobResult replay = pasted(replays[0]);
  EXPECT_EQ(replay.exit_code, 0) << replays[0] << "\n" << replay.output;

  // The plan alone says how to run: no --schedule, --microbatches or --batch.
  const JobResult bare = pipedream("run --plan auto.json --model mlp --data synthetic --minibatches 2 --no-eval "
                                   "--threads-per-worker 1");
  ASSERT_EQ(bare.exit_code, 0) << bare.output;
  EXPECT_NE(bare.output.find(cat(plan["schedule"].get<std::string>(), ", batches of 8: ", plan["microbatches"].get<int>(),
                                 " microbatches")),
            std::string::npos)
      << bare.output;
}

// --straight on more workers than layers: refused, naming --fewer-workers
// and why; with --fewer-workers the plan says how many it leaves idle and
// makes no claim of a 0 us bound.
TEST_F(FirstHour, StraightPlanThatCannotFillTheWorkersSaysWhy) {
  write_text(path("four.json"), chain_profile(4, "four").dump());
  const JobResult refused = pipedream("plan --profile four.json --workers 16 --bandwidth 10 --straight");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--straight on 16 workers needs 16 stages"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("four has 4 layers"), std::string::npos) << refused.output;
  EXPECT_NE(refused.output.find("--fewer-workers"), std::string::npos) << refused.output;

  const JobResult fewer = pipedream("plan --profile four.json --workers 16 --bandwidth 10 --straight --fewer-workers");
  ASSERT_EQ(fewer.exit_code, 0) << fewer.output;
  EXPECT_NE(fewer.output.find("of the 16 workers ("), std::string::npos) << fewer.output;
  EXPECT_EQ(fewer.output.find("below 0.000"), std::string::npos) << fewer.output;
}

// The baselines are each baseline's own plan, replayed as the plan is: the
// same data-parallel figure with and without --straight.
TEST_F(FirstHour, BaselinesUnderStraightAreTheBaselinesOwnPlans) {
  // With optimizer time, which the closed form leaves out and the replay counts, the two differ.
  json six = chain_profile(6, "six");
  for (json& n : six["nodes"]) n["optimizer_ms"] = 1;
  write_text(path("six.json"), six.dump());
  const JobResult straight = pipedream("plan --profile six.json --workers 4 --bandwidth 10 --straight");
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  std::smatch baseline;
  ASSERT_TRUE(std::regex_search(straight.output, baseline, std::regex("over data parallelism \\(([^)]*)\\)")))
      << straight.output;
  // Data parallelism's own plan, as the search without --straight replays it: its row of the candidates.
  const JobResult any = pipedream("plan --profile six.json --workers 4 --bandwidth 10");
  ASSERT_EQ(any.exit_code, 0) << any.output;
  std::smatch row;
  ASSERT_TRUE(std::regex_search(any.output, row, std::regex("data-parallel +4 +[^ ]+ [a-z]+ +([^ ]+ [a-z]+)\n")))
      << any.output;
  EXPECT_EQ(baseline[1].str(), row[1].str()) << straight.output << any.output;
}

// interleaved-1f1b under --schedule auto: the real reason (too few layers
// for 2 stages a worker); and a DAG profile's synchronous families are
// searched too.
TEST_F(FirstHour, ScheduleAutoSaysWhyAFamilyIsOutAndSearchesDags) {
  write_text(path("three.json"), chain_profile(3, "three").dump());
  const JobResult three = pipedream("plan --profile three.json --workers 2 --bandwidth 10 --schedule auto");
  ASSERT_EQ(three.exit_code, 0) << three.output;
  EXPECT_NE(three.output.find("interleaved-1f1b   not considered: 2 stages on each of 2 workers are 4 stages, but "
                              "three has 3 layers"),
            std::string::npos)
      << three.output;

  json dag = chain_profile(6, "dag");
  dag["edges"] = json::array({{0, 1}, {0, 2}, {1, 3}, {2, 3}, {3, 4}, {4, 5}});
  write_text(path("dag.json"), dag.dump());
  const JobResult r = pipedream("plan --profile dag.json --workers 2 --bandwidth 10 --schedule auto");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("layer chains only"), std::string::npos) << r.output;
  for (const char* family : {"2bw ", "1f1b-flush ", "zb-h1 "})
    EXPECT_TRUE(std::regex_search(r.output, std::regex(std::string("\n  ") + family + " *1-1 "))) << family << r.output;
}

// --schedule auto choosing a V: the plan records, for every stage, the
// memory of the worker the V places it on (stages w and 2p - 1 - w on
// worker w), so the first and last stage share worker 0's figure.
TEST_F(FirstHour, ScheduleAutoRecordsAVsMemoryByTheWorkerEachStageRunsOn) {
  json heavy_first = chain_profile(8, "chain", 16);
  heavy_first["nodes"][0]["parameter_bytes"] = 2000000;  // worker 0 holds more than the others
  write_text(path("heavy.json"), heavy_first.dump());
  const JobResult r =
      pipedream("plan --profile heavy.json --workers 4 --bandwidth 10 --schedule auto --memory 6.6MB -o v.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json plan = json::parse(file_text(path("v.json")));
  ASSERT_EQ(plan.value("schedule", ""), "zb-v") << r.output;
  const json& stages = plan.at("stages");
  ASSERT_EQ(stages.size(), 8u);
  for (int w = 0; w < 4; ++w)
    EXPECT_EQ(stages[w].value("memory_bytes", 0.0), stages[7 - w].value("memory_bytes", 0.0)) << "worker " << w;
  EXPECT_GT(stages[0].value("memory_bytes", 0.0), stages[3].value("memory_bytes", 0.0));
}

// The `run` line `plan --schedule auto` prints builds the model that was
// profiled: the profile records --model and --model-options as given
// (the limit leaves 1f1b-rr out: only the other families print a run line).
TEST_F(FirstHour, PrintedRunLineRepeatsTheProfilesModelFlags) {
  const JobResult profile = pipedream("profile --model mlp --model-options hidden=24,depth=3 --batch 8 --iters 2 "
                                      "--warmup 1 --threads 1 -o opts.json");
  ASSERT_EQ(profile.exit_code, 0) << profile.output;
  const json recorded = json::parse(file_text(path("opts.json")));
  EXPECT_EQ(recorded.value("model_argument", ""), "mlp");
  EXPECT_EQ(recorded.value("model_options", ""), "hidden=24,depth=3");
  const JobResult plan = pipedream("plan --profile opts.json --workers 2 --bandwidth 10 --schedule auto --memory 300KB "
                                   "-o opts.plan.json");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  const std::vector<std::string> runs = printed_commands(plan.output, "run");
  ASSERT_EQ(runs.size(), 1u) << plan.output;
  EXPECT_NE(runs[0].find("--model mlp --model-options hidden=24,depth=3"), std::string::npos) << runs[0];
  const JobResult run = pasted(runs[0], " --data synthetic --minibatches 4 --no-eval --threads-per-worker 1");
  EXPECT_EQ(run.exit_code, 0) << runs[0] << "\n" << run.output;
}

// `run --plan auto --schedule X` plans for X: the plan records X, its
// microbatches and batch, and the run compares with X's prediction.
TEST_F(FirstHour, RunPlanAutoPlansForTheScheduleGiven) {
  const JobResult r = pipedream("run --plan auto --workers 2 --schedule 1f1b-flush --microbatches 4 --batch 8 "
                                "--model mlp --model-options hidden=24,depth=3 --data synthetic --minibatches 12 "
                                "--no-eval --threads-per-worker 1 --plan-out pa.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json plan = json::parse(file_text(path("pa.json")));
  EXPECT_EQ(plan.value("schedule", ""), "1f1b-flush");
  EXPECT_EQ(plan.value("microbatches", 0), 4);
  EXPECT_EQ(plan.value("batch", 0), 8);
  EXPECT_EQ(r.output.find("not compared with the plan's prediction"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(replay, steady state)"), std::string::npos) << r.output;
}

// A chain whose stashed activations (4 MB a layer per minibatch) dwarf its
// weights (1 MB a layer): under 5 MB per worker on 2 workers no plan fits
// as it is, and a flushing family fits only by recomputing.
json activation_heavy_profile() {
  json p = chain_profile(4, "heavy");
  for (json& n : p["nodes"]) n["activation_bytes"] = 4000000;
  return p;
}

// The fullest worker of a `simulate --profile` report (its memory column).
double simulated_peak_bytes(const std::string& output) {
  double peak = 0;
  const std::regex row(R"(\n +[0-9]+ +[0-9]+ +[0-9.]+% .* ([0-9.]+) (B|KB|MB|GB)(?=\n))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), row); it != std::sregex_iterator(); ++it) {
    const double unit = (*it)[2] == "GB" ? 1e9 : (*it)[2] == "MB" ? 1e6 : (*it)[2] == "KB" ? 1e3 : 1;
    peak = std::max(peak, std::stod((*it)[1]) * unit);
  }
  return peak;
}

// Issue 41, What to build 3: --schedule auto lets every flushing family
// choose recomputation with its cut. Without recomputation nothing fits 5
// MB; with it (the default under a limit) a flushing family is chosen,
// recomputing, and its replay stays under the limit.
TEST_F(FirstHour, ScheduleAutoLetsAFlushingFamilyFitByRecomputing) {
  write_text(path("heavy.json"), activation_heavy_profile().dump());
  const std::string plan = "plan --profile heavy.json --workers 2 --bandwidth 10 --straight --schedule auto --memory 5MB";
  const JobResult r = pipedream(plan + " -o heavy.plan.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json chosen = json::parse(file_text(path("heavy.plan.json")));
  ASSERT_NE(chosen.value("schedule", ""), "1f1b-rr") << r.output;
  size_t recomputed = 0;
  for (const json& st : chosen["stages"]) recomputed += st.value("recompute_layers", json::array()).size();
  EXPECT_GT(recomputed, 0u) << r.output;
  const JobResult replay = pipedream(cat("simulate --plan heavy.plan.json --profile heavy.json --schedule ",
                                         chosen["schedule"].get<std::string>(), " --microbatches ",
                                         chosen["microbatches"].get<int>(),
                                         chosen.value("virtual_stages", 0) > 1
                                             ? cat(" --virtual-stages ", chosen["virtual_stages"].get<int>())
                                             : std::string()));
  ASSERT_EQ(replay.exit_code, 0) << replay.output;
  const double peak = simulated_peak_bytes(replay.output);
  EXPECT_GT(peak, 0) << replay.output;
  EXPECT_LE(peak, 5e6) << replay.output;

  const JobResult plain = pipedream(plan + " --recompute none");
  ASSERT_EQ(plain.exit_code, 2) << plain.output;
  EXPECT_EQ(plain.output.find("<- chosen"), std::string::npos) << plain.output;
}

// Issue 41, What to build 5: when nothing fits, `plan --schedule auto`
// prints the least memory that fits with recomputation and without, and
// each is true: its command plans, the size below it does not.
TEST_F(FirstHour, ScheduleAutoSaysTheLeastMemoryWithAndWithoutRecomputationTruly) {
  write_text(path("heavy.json"), activation_heavy_profile().dump());
  const std::string plan = "plan --profile heavy.json --workers 2 --bandwidth 10 --straight --schedule auto";
  const JobResult r = pipedream(plan + " --memory 3MB");
  ASSERT_EQ(r.exit_code, 2) << r.output;
  std::smatch with, without;
  ASSERT_TRUE(std::regex_search(r.output, with, std::regex(
      R"(with recomputation \(auto\), [^(]*\(--memory ([0-9]+) fits, ([0-9]+) does not\))")))
      << r.output;
  ASSERT_TRUE(std::regex_search(r.output, without, std::regex(
      R"(without recomputation, [^(]*\(--memory ([0-9]+) fits, ([0-9]+) does not\))")))
      << r.output;
  EXPECT_LT(std::stoull(with[1]), std::stoull(without[1])) << r.output;
  const std::vector<std::string> fits = printed_commands(r.output, "plan");
  ASSERT_EQ(fits.size(), 2u) << r.output;
  EXPECT_NE(fits[0].find(cat("--memory ", with[1].str(), " --recompute auto")), std::string::npos) << fits[0];
  EXPECT_NE(fits[1].find(cat("--memory ", without[1].str(), " --recompute none")), std::string::npos) << fits[1];
  for (const std::string& c : fits) {
    const JobResult ok = pasted(c);
    EXPECT_EQ(ok.exit_code, 0) << c << "\n" << ok.output;
    EXPECT_NE(ok.output.find("<- chosen"), std::string::npos) << c << "\n" << ok.output;
  }
  const JobResult below_with = pipedream(plan + " --memory " + with[2].str() + " --recompute auto");
  EXPECT_EQ(below_with.exit_code, 2) << below_with.output;
  const JobResult below_without = pipedream(plan + " --memory " + without[2].str() + " --recompute none");
  EXPECT_EQ(below_without.exit_code, 2) << below_without.output;
}

// Issue 41, What to build 2: `run --plan auto --schedule 1f1b-flush
// --memory` chooses the cut and recomputation by 1f1b-flush's own memory
// (one weight version, its held microbatches), not 1F1B-RR's stashing,
// under which gpt-mini does not fit 35 MB on 2 workers; every stage's
// figure, 1f1b-flush's replay, is within the limit.
TEST_F(FirstHour, RunPlanAutoUnderMemoryPlansByTheSchedulesOwnMemory) {
  const JobResult r = pipedream("run --plan auto --workers 2 --schedule 1f1b-flush --microbatches 4 --batch 8 "
                                "--model gpt-mini --memory 35MB --data synthetic --minibatches 1 --no-eval "
                                "--threads-per-worker 1 --plan-out flush.json", 300);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const json plan = json::parse(file_text(path("flush.json")));
  EXPECT_EQ(plan.value("schedule", ""), "1f1b-flush");
  size_t recomputed = 0;
  for (const json& st : plan["stages"]) {
    recomputed += st.value("recompute_layers", json::array()).size();
    EXPECT_LE(st.value("memory_bytes", 0.0), 35e6) << r.output;
  }
  EXPECT_GT(recomputed, 0u) << r.output;
}

// A misspelt key in a file whose fields are ours is refused, naming it and
// the nearest known key.
TEST_F(FirstHour, MisspeltKeysAreRefusedNamingTheNearest) {
  write_text(path("plan.json"), R"({"format": "pipedream-plan/1", "schedul": "1f1b-flush", "stages": [
    {"index": 0, "layers": [0, 7], "replicas": 1, "ranks": [0]}]})");
  const JobResult plan = pipedream("simulate --plan plan.json");
  EXPECT_EQ(plan.exit_code, 2) << plan.output;
  EXPECT_NE(plan.output.find(R"(unknown key "schedul" (did you mean "schedule"?))"), std::string::npos) << plan.output;

  write_text(path("stage.json"), R"({"format": "pipedream-plan/1", "stages": [
    {"index": 0, "layers": [0, 7], "replica": 1, "ranks": [0]}]})");
  const JobResult stage = pipedream("simulate --plan stage.json");
  EXPECT_EQ(stage.exit_code, 2) << stage.output;
  EXPECT_NE(stage.output.find(R"(stages[0]: unknown key "replica" (did you mean "replicas"?))"), std::string::npos)
      << stage.output;

  write_text(path("topo.json"), R"({"levels": [{"count": 2, "bandwith_GBps": 10}]})");
  write_text(path("three.json"), chain_profile(3).dump());
  const JobResult topo = pipedream("plan --profile three.json --topology topo.json");
  EXPECT_EQ(topo.exit_code, 2) << topo.output;
  EXPECT_NE(topo.output.find(R"(unknown key "bandwith_GBps" (did you mean "bandwidth_GBps"?))"), std::string::npos)
      << topo.output;

  write_text(path("spec.json"), R"({"name": "m", "input": {"shape": [4]}, "clases": 3,
    "layers": [{"type": "linear", "out_features": 3}]})");
  const JobResult spec = pipedream("models --model-spec spec.json");
  EXPECT_EQ(spec.exit_code, 2) << spec.output;
  EXPECT_NE(spec.output.find("unknown top-level field 'clases' (did you mean 'classes'?)"), std::string::npos)
      << spec.output;

  json profile = chain_profile(3);
  profile["nodes"][1]["forward_msec"] = 1;
  write_text(path("prof.json"), profile.dump());
  const JobResult prof = pipedream("plan --profile prof.json --workers 2 --bandwidth 10");
  EXPECT_EQ(prof.exit_code, 2) << prof.output;
  EXPECT_NE(prof.output.find(R"(unknown key "forward_msec" (did you mean "forward_ms"?))"), std::string::npos)
      << prof.output;
}

// An interrupted run's step-N.partial folders go at the next start; a run
// keeps the newest 3 checkpoints unless told otherwise, and says so in --help.
TEST_F(FirstHour, CheckpointFoldersDoNotPileUp) {
  const std::string model = " --model mlp --model-options hidden=24,depth=3 --data synthetic --batch 8 --no-eval";
  for (const std::string cmd : {"train", "run"}) {
    const JobResult help = pipedream(cmd + " --help");
    EXPECT_NE(help.output.find("(default 3; 0: keep all)"), std::string::npos) << help.output;
    const std::string ck = path(cmd + "-ck");
    fs::create_directories(ck + "/step-2.partial");
    fs::create_directories(ck + "/step-40.partial");
    write_text(ck + "/step-2.partial/stage-0.safetensors", "half written");
    std::string args = cmd + model + " --minibatches 6 --checkpoint-every 1 --checkpoint-dir " + ck;
    if (cmd == "run") {
      write_text(path("one.json"), R"({"format": "pipedream-plan/1", "stages": [
        {"index": 0, "layers": [0, 7], "replicas": 1, "ranks": [0]}]})");
      args += " --plan one.json --threads-per-worker 1";
    } else {
      args += " --threads 1";
    }
    const JobResult r = pipedream(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(ck)) left.push_back(e.path().filename().string());
    std::sort(left.begin(), left.end());
    EXPECT_EQ(left, (std::vector<std::string>{"latest", "step-4", "step-5", "step-6"})) << cmd;
  }
}

// Resuming a cosine run with a larger --minibatches stretches its schedule:
// said, with the rate before and after. The resumed metrics continue the
// interrupted run's clock.
TEST_F(FirstHour, ResumeSaysTheScheduleIsStretchedAndContinuesTheClock) {
  const std::string run = "train --model mlp --model-options hidden=24,depth=3 --data synthetic --batch 8 --no-eval "
                          "--threads 1 --lr-schedule cosine --lr 0.05 --log-every 1 --metrics m.jsonl "
                          "--checkpoint-dir ck";
  const JobResult first = pipedream(run + " --minibatches 10");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  // As if the first run had taken an hour: the resumed lines continue from there.
  std::string log;
  for (json line : metric_lines(path("m.jsonl"), "step")) {
    line["seconds"] = line["seconds"].get<double>() + 3600;
    log += line.dump() + "\n";
  }
  write_text(path("m.jsonl"), log);
  const JobResult again = pipedream(run + " --minibatches 20 --resume ck");
  ASSERT_EQ(again.exit_code, 0) << again.output;
  EXPECT_NE(again.output.find("note: --lr-schedule cosine is stretched from the checkpoint run's 10 steps to 20: the "
                              "learning rate at step 10 goes from "),
            std::string::npos)
      << again.output;
  const std::vector<json> steps = metric_lines(path("m.jsonl"), "step");
  ASSERT_EQ(steps.size(), 20u);
  for (size_t i = 1; i < steps.size(); ++i)
    EXPECT_GE(steps[i]["seconds"].get<double>(), steps[i - 1]["seconds"].get<double>()) << "step " << i;
  EXPECT_GT(steps.back()["seconds"].get<double>(), 3600);
}

// Gemm in the forms PyTorch writes for Hugging Face's Conv1D (transB=0) and
// for addmm with alpha and beta: imported and trained.
TEST_F(FirstHour, GemmOfEveryFormImportsAndTrains) {
  using namespace pd::onnx;
  using namespace pd::onnx::testing;
  ModelProto m;
  m.ir_version = 8;
  m.opsets[""] = 17;
  ValueInfo in;
  in.name = "x";
  in.elem_type = kFloat;
  in.dims = {4, 6};
  in.dim_names = {"", ""};
  in.has_shape = true;
  m.graph.inputs.push_back(in);
  ValueInfo out;
  out.name = "logits";
  out.elem_type = kFloat;
  m.graph.outputs.push_back(out);
  m.graph.initializers = {float_tensor("conv1d.weight", {6, 8}), float_tensor("conv1d.bias", {8}),
                          float_tensor("head.weight", {5, 8}), float_tensor("head.c", {1})};
  Node head = make_node("head", "Gemm", {"h", "head.weight", "head.c"}, {"logits"});
  head.attributes = {int_attribute("transB", 1), float_attribute("alpha", 2.0f), float_attribute("beta", 0.5f)};
  m.graph.nodes = {make_node("conv1d", "Gemm", {"x", "conv1d.weight", "conv1d.bias"}, {"y"}),
                   make_node("act", "Tanh", {"y"}, {"h"}), head};
  write_text(path("gemm.onnx"), encode(m));
  const JobResult r = pipedream("train --model gemm.onnx --data synthetic --batch 16 --minibatches 3 --no-eval --threads 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("only Gemm with"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace pd::testing
