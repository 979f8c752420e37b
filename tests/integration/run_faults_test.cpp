// How `pipedream run` ends when something is wrong: bad input is refused
// before training with exit code 2; a killed rank ends the job quickly with
// a message naming it. Also checkpoints and resume, metrics and trace.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <set>
#include <thread>

#include "run_job.h"

namespace pd::testing {
namespace {

const std::string kModel = " --model mlp --model-options hidden=24,depth=3 --threads-per-worker 1";

std::string plan_file(const std::string& dir) {
  write_text(dir + "/plan.json", kPlan1111);
  return dir + "/plan.json";
}

TEST(RunBadInput, RefusedBeforeTrainingWithExitCode2) {
  const std::string dir = scratch_dir("bad_input");
  const std::string plan = plan_file(dir);
  const std::string run = pipedream_binary() + " run --minibatches 4 --data synthetic";
  struct Case {
    std::string name, command, message;
  };
  write_text(dir + "/broken.json", "{\"format\": \"pipedream-plan/1\", \"stages\": [");
  write_text(dir + "/gap.json", R"({"format": "pipedream-plan/1", "stages": [
    {"layers": [0, 2], "replicas": 1, "ranks": [0]}, {"layers": [4, 7], "replicas": 1, "ranks": [1]}]})");
  const std::vector<Case> cases = {
      {"plan for another model", run + " --plan " + plan + " --model cnn", "layers"},
      {"malformed plan", run + " --plan " + dir + "/broken.json" + kModel, "invalid JSON"},
      {"inconsistent plan", run + " --plan " + dir + "/gap.json" + kModel, "must start right after"},
      {"missing plan", run + " --plan " + dir + "/none.json" + kModel, "cannot open"},
      {"missing data", pipedream_binary() + " run --minibatches 4 --plan " + plan + kModel +
                           " --data fashion-mnist --data-dir " + dir + "/no-such-folder", "no-such-folder"},
      {"wrong world size", mpirun(3) + run + " --plan " + plan + kModel, "needs 4 workers but the MPI world has 3"},
      {"weights policy with a flush schedule", run + " --plan " + plan + kModel + " --schedule gpipe --weights vertical",
       "1f1b-rr only"},
  };
  for (const Case& c : cases) {
    JobResult r = run_shell(c.command);
    EXPECT_EQ(r.exit_code, 2) << c.name << ":\n" << r.output;
    EXPECT_NE(r.output.find(c.message), std::string::npos) << c.name << ":\n" << r.output;
  }
}

std::string last_line(const std::string& output) {
  const size_t end = output.find_last_not_of('\n');
  if (end == std::string::npos) return "";
  const size_t start = output.rfind('\n', end);
  return output.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

// `pipedream run` without mpirun relaunches itself under it. A bad input
// that only the workers see (a checkpoint of another run: its settings are
// checked against the worker's stage) must end the output with the worker's
// own one-line error and exit 2, not with mpirun's report.
TEST(RunRelaunch, WorkerBadInputEndsWithItsOneLineError) {
  const std::string dir = scratch_dir("relaunch_bad_input");
  write_text(dir + "/plan.json", R"({"format": "pipedream-plan/1", "config": "1-1", "stages": [
    {"index": 0, "layers": [0, 3], "replicas": 1, "ranks": [0]},
    {"index": 1, "layers": [4, 7], "replicas": 1, "ranks": [1]}]})");
  const std::string run = pipedream_binary() + " run --plan " + dir + "/plan.json" + kModel +
                          " --data synthetic --minibatches 2 --no-eval --timeout 30";
  JobResult first = run_shell(run + " --batch 8 --checkpoint-dir " + dir + "/ck");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  ASSERT_NE(first.output.find("launching 2 workers"), std::string::npos) << first.output;

  JobResult other = run_shell(run + " --batch 16 --resume " + dir + "/ck");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  const std::string last = last_line(other.output);
  EXPECT_EQ(last.rfind("error: --resume ", 0), 0u) << "last line: " << last << "\nwhole output:\n" << other.output;
  EXPECT_NE(last.find("the checkpoint has batch = 8 but this run has 16"), std::string::npos) << other.output;
  // Once, by the launching process: not by every rank, and without mpirun's banner.
  size_t errors = 0;
  for (size_t at = other.output.find("error: "); at != std::string::npos; at = other.output.find("error: ", at + 1))
    ++errors;
  EXPECT_EQ(errors, 1u) << other.output;
  EXPECT_EQ(other.output.find("Primary job"), std::string::npos) << other.output;
  EXPECT_EQ(other.output.find("mpirun detected"), std::string::npos) << other.output;
}

// Kills one worker mid-run; the others must notice within the timeout.
TEST(RunFaults, KilledRankEndsTheJobNamingIt) {
  const std::string dir = scratch_dir("kill");
  const std::string metrics = dir + "/m.jsonl", out = dir + "/out.txt";
  const std::string cmd = mpirun(4) + pipedream_binary() + " run --plan " + plan_file(dir) + kModel +
                          " --data synthetic --batch 8 --lr 0.01 --minibatches 100000 --no-eval --log-every 1 --timeout 5"
                          " --metrics " + metrics;
  const auto start = std::chrono::steady_clock::now();
  const pid_t job = start_background_job(cmd, out);
  ASSERT_GE(job, 0);
  // Wait until training runs, then kill rank 2 (a child of mpirun running stage 2).
  pid_t victim = -1;
  for (int i = 0; i < 600 && victim < 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (step_losses(metrics + ".partial").size() < 5) continue;  // the live log; renamed when a run finishes
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      const std::string pid = e.path().filename();
      if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
      std::ifstream env(e.path() / "environ", std::ios::binary);
      std::string all((std::istreambuf_iterator<char>(env)), std::istreambuf_iterator<char>());
      std::ifstream cmdline(e.path() / "cmdline", std::ios::binary);
      std::string c((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
      if (c.find(metrics) != std::string::npos && all.find(std::string("OMPI_COMM_WORLD_RANK=2") + '\0') != std::string::npos &&
          c.rfind(pipedream_binary(), 0) == 0) {
        victim = std::stoi(pid);
        break;
      }
    }
  }
  ASSERT_GT(victim, 0) << "no rank 2 found";
  kill(victim, SIGKILL);
  int status = 0;
  if (!wait_background_job(job, 60, &status))  // 60 s: far more than the 5 s timeout
    FAIL() << "the job hung after rank 2 died";
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::ifstream f(out);
  const std::string output((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(!WIFEXITED(status) || WEXITSTATUS(status) != 0) << output;
  EXPECT_NE(output.find("rank 2"), std::string::npos) << output;
  EXPECT_LT(seconds, 60) << output;
}

// The processes whose command line holds `token` (a test's scratch path).
std::vector<pid_t> processes_with(const std::string& token) {
  std::vector<pid_t> out;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream cmdline(e.path() / "cmdline", std::ios::binary);
    std::string c((std::istreambuf_iterator<char>(cmdline)), std::istreambuf_iterator<char>());
    std::ifstream stat(e.path() / "stat");
    std::string fields;
    std::getline(stat, fields);
    const bool zombie = fields.find(") Z ") != std::string::npos;
    if (!zombie && c.find(token) != std::string::npos) out.push_back(std::stoi(pid));
  }
  return out;
}

// kill -9 of the process `pipedream run` was (the launcher, which started
// mpirun): the workers end too instead of writing on as orphans.
TEST(RunFaults, KillingTheLauncherEndsItsWorkers) {
  const std::string dir = scratch_dir("kill_launcher");
  const std::string metrics = dir + "/m.jsonl", out = dir + "/out.txt";
  const std::string cmd = pipedream_binary() + " run --plan " + plan_file(dir) + kModel +
                          " --data synthetic --batch 8 --minibatches 100000 --no-eval --log-every 1 --metrics " + metrics;
  const pid_t launcher = start_background_job(cmd, out);
  ASSERT_GE(launcher, 0);
  for (int i = 0; i < 600 && step_losses(metrics + ".partial").size() < 5; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GE(step_losses(metrics + ".partial").size(), 5u) << "training never started";
  ASSERT_GE(processes_with(metrics).size(), 5u) << "the launcher, mpirun and 4 workers";
  kill(launcher, SIGKILL);
  int status = 0;
  waitpid(launcher, &status, 0);
  std::vector<pid_t> left = processes_with(metrics);
  // mpirun gets SIGTERM at once and ends the workers well within 5 s
  // (without that, orphans trained on for 10 s and more).
  for (int i = 0; i < 50 && !left.empty(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    left = processes_with(metrics);
  }
  EXPECT_TRUE(left.empty()) << left.size() << " processes of the run outlived its launcher by 5 s";
  ::kill(-launcher, SIGKILL);  // whatever is left of its process group
}

// Ctrl-C on `train`: it stops before its next step, says where and how to
// resume, exits 130 and leaves the log partial (as `run` does).
TEST(TrainInterrupt, CtrlCStopsBeforeTheNextStepAndSaysHowToResume) {
  const std::string dir = scratch_dir("train_interrupt");
  const std::string ck = dir + "/ck", metrics = dir + "/m.jsonl", out = dir + "/out.txt";
  const std::string args = " train --model mlp --model-options hidden=24,depth=3 --data synthetic --batch 8"
                           " --threads 1 --no-eval --log-every 1 --checkpoint-dir " + ck + " --checkpoint-every 10";
  const pid_t job = start_background_job(pipedream_binary() + args + " --minibatches 1000000 --metrics " + metrics, out);
  ASSERT_GE(job, 0);
  for (int i = 0; i < 600 && !std::filesystem::exists(ck + "/latest"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  kill(job, SIGINT);
  int status = 0;
  ASSERT_TRUE(wait_background_job(job, 60, &status)) << "train did not stop on Ctrl-C";
  std::ifstream f(out);
  const std::string output((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  ASSERT_TRUE(WIFEXITED(status)) << output;
  EXPECT_EQ(WEXITSTATUS(status), 130) << output;
  EXPECT_NE(output.find("interrupted (Ctrl-C) before step "), std::string::npos) << output;
  EXPECT_NE(output.find("resume from the latest checkpoint with --resume " + ck), std::string::npos) << output;
  EXPECT_TRUE(std::filesystem::exists(metrics + ".partial"));
  EXPECT_FALSE(std::filesystem::exists(metrics));
}

TEST(RunCheckpoints, ResumeContinuesBitIdentically) {
  const std::string dir = scratch_dir("resume");
  const std::string plan = plan_file(dir);
  const std::string base = mpirun(4) + pipedream_binary() + " run --plan " + plan + kModel +
                           " --data synthetic --batch 8 --minibatches 12 --no-eval --checkpoint-every 4 --seed 5";
  JobResult full = run_shell(base + " --checkpoint-dir " + dir + "/ck --save " + dir + "/full.safetensors");
  ASSERT_EQ(full.exit_code, 0) << full.output;
  ASSERT_TRUE(std::filesystem::exists(dir + "/ck/step-4/stage-3.safetensors"));
  ASSERT_TRUE(std::filesystem::exists(dir + "/ck/step-12/state.json"));
  JobResult resumed = run_shell(base + " --resume " + dir + "/ck/step-4 --save " + dir + "/resumed.safetensors");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  auto a = load_by_name(dir + "/full.safetensors"), b = load_by_name(dir + "/resumed.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (auto& [n, t] : a) EXPECT_TRUE(same_bits(t, b[n])) << n;
  // A checkpoint of another run is refused with the reason.
  JobResult other = run_shell(base + " --batch 16 --resume " + dir + "/ck");
  EXPECT_EQ(other.exit_code, 2) << other.output;
}

TEST(RunOutputs, MetricsEvaluationAndTraceCoverEveryRank) {
  const std::string dir = scratch_dir("outputs");
  JobResult r = run_shell(mpirun(4) + pipedream_binary() + " run --plan " + plan_file(dir) + kModel +
                          " --data synthetic --batch 32 --minibatches 40 --eval-every 20 --eval-batch 256"
                          " --metrics " + dir + "/m.jsonl --trace " + dir + "/trace.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(metric_lines(dir + "/m.jsonl", "eval").size(), 2u);
  auto ranks = metric_lines(dir + "/m.jsonl", "rank");
  ASSERT_EQ(ranks.size(), 4u);
  const double run_seconds = metric_lines(dir + "/m.jsonl", "summary").at(0)["seconds"].get<double>();
  for (const auto& l : ranks) {
    EXPECT_GT(l["busy_fraction"].get<double>(), 0.0);
    EXPECT_LE(l["busy_fraction"].get<double>(), 1.0);
    EXPECT_GT(l["peak_memory_bytes"].get<double>(), 0.0);
    // The CPU a rank got inside its actions: never more than their wall time.
    EXPECT_GT(l["busy_cpu_s"].get<double>(), 0.0);
    EXPECT_LE(l["busy_cpu_s"].get<double>(), l["busy_s"].get<double>() * 1.01 + 0.01);
    // Every rank sends or receives through its communication threads, which
    // take some CPU, and less than the whole run on one core.
    EXPECT_GT(l["comm_cpu_s"].get<double>(), 0.0);
    EXPECT_LT(l["comm_cpu_s"].get<double>(), run_seconds);
    // The whole process's CPU holds both, and the runtime's own between actions.
    EXPECT_GE(l["process_cpu_s"].get<double>(), l["busy_cpu_s"].get<double>() + l["comm_cpu_s"].get<double>() - 0.005)
        << l.dump();
  }
  // Steady state: the middle half of the 40 steps, evaluations included.
  auto summary = metric_lines(dir + "/m.jsonl", "summary");
  ASSERT_EQ(summary.size(), 1u);
  EXPECT_GT(summary[0]["steady_samples_per_s"].get<double>(), 0.0);
  EXPECT_NEAR(summary[0]["steady_samples_per_s"].get<double>() * summary[0]["steady_time_per_minibatch_s"].get<double>(),
              32.0, 1e-6);
  std::ifstream f(dir + "/trace.json");
  auto trace = nlohmann::json::parse(f);
  std::set<int> pids;
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X") {
      pids.insert(e["pid"].get<int>());
      if (e["cat"] == "F" || e["cat"] == "B") {
        ASSERT_TRUE(e["args"].contains("cpu_ms")) << e.dump();
        EXPECT_LE(e["args"]["cpu_ms"].get<double>(), e["dur"].get<double>() / 1e3 * 1.01 + 0.05) << e.dump();
      }
    }
  EXPECT_EQ(pids.size(), 4u);
  EXPECT_NE(r.output.find("test accuracy"), std::string::npos) << r.output;
}

// A stage's forward of an item starts after the stage before it finished
// the item's forward, and its backward after the stage after it finished
// the item's backward, in the trace as in the run: every rank's spans count
// from one moment. (Each rank counting from its own exit from the start
// barrier drew 197 of 768 gpt-mini spans before their input existed, by up
// to 4.6 ms, with 4 ranks on 2 cores.)
TEST(RunOutputs, TraceDrawsNoComputationBeforeItsInputExists) {
  const std::string dir = scratch_dir("trace_clock");
  JobResult r = run_shell(mpirun(4) + pipedream_binary() + " run --plan " + plan_file(dir) + kModel +
                          " --data synthetic --batch 32 --schedule 1f1b-flush --microbatches 8 --minibatches 6"
                          " --no-eval --trace " + dir + "/trace.json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const TraceOrder order = trace_order(dir + "/trace.json");
  EXPECT_EQ(order.pairs, 2 * 3 * 6 * 8);  // F and B, 3 boundaries, 48 microbatches
  EXPECT_TRUE(order.early.empty()) << order.early.size() << " start before their input exists, e.g. "
                                   << order.early.front();
}

// run --svg draws the measured timeline: a row per worker and, for zb-h1,
// forward, input-gradient and weight-gradient boxes of the batch's 8
// microbatches on every worker.
TEST(RunOutputs, SvgDrawsTheMeasuredTimeline) {
  const std::string dir = scratch_dir("svg");
  JobResult r = run_shell(mpirun(4) + pipedream_binary() + " run --plan " + plan_file(dir) + kModel +
                          " --data synthetic --batch 32 --schedule zb-h1 --microbatches 8 --minibatches 2 --no-eval"
                          " --svg " + dir + "/timeline.svg");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  std::ifstream f(dir + "/timeline.svg");
  const std::string svg((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  auto count = [&](const std::string& needle) {
    size_t n = 0;
    for (size_t at = svg.find(needle); at != std::string::npos; at = svg.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("class=\"row\""), 4u) << svg.substr(0, 400);
  // Two batches of 8 microbatches on 4 workers: 64 of each kind.
  EXPECT_EQ(count("class=\"F\""), 64u);
  EXPECT_EQ(count("class=\"B\""), 64u);
  EXPECT_EQ(count("class=\"W\""), 64u);
  EXPECT_NE(svg.find("measured: zb-h1"), std::string::npos);
}

}  // namespace
}  // namespace pd::testing
