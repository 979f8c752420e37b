// `pipedream run` over the same-host shared-memory path: a cnn pipeline with
// a replicated stage equals `--reference` bit for bit with rings far
// smaller than its messages, and neither a finished nor a killed job leaves
// anything in /dev/shm.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <sstream>

#include "run_job.h"

namespace pd::testing {
namespace {

std::set<std::string> shm_entries() {
  std::set<std::string> names;
  std::error_code ec;
  for (auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string n = e.path().filename().string();
    if (n.rfind("pipedream-", 0) == 0) names.insert(n);
  }
  return names;
}

// Entries that appeared during a job and are still there.
std::set<std::string> left_behind(const std::set<std::string>& before) {
  std::set<std::string> left;
  for (auto& n : shm_entries())
    if (!before.count(n)) left.insert(n);
  return left;
}

// cnn: conv1 relu1 pool1 conv2 relu2 pool2 flatten fc1 relu3 fc2.
constexpr const char* kCnnPlan21 = R"({"format": "pipedream-plan/1", "config": "2-1", "stages": [
  {"index": 0, "layers": [0, 4], "replicas": 2, "ranks": [0, 1]},
  {"index": 1, "layers": [5, 9], "replicas": 1, "ranks": [2]}]})";

TEST(ShmRun, CnnWithReplicatedStageEqualsTheReferenceOverSharedMemory) {
  const std::string dir = scratch_dir("shm_cnn");
  write_text(dir + "/21.json", kCnnPlan21);
  const std::string args = " run --plan " + dir + "/21.json --model cnn --data synthetic --seed 5 --no-eval"
                           " --threads-per-worker 1 --batch 8 --minibatches 6 --log-every 1 --timeout 60";
  const auto before = shm_entries();
  // 4 KiB rings: every activation and gradient bucket spans many of them.
  JobResult dist = run_shell("env PIPEDREAM_SHM_RING_BYTES=4096 " + mpirun(3) + pipedream_binary() + args +
                             " --save " + dir + "/dist.safetensors --metrics " + dir + "/dist.jsonl");
  ASSERT_EQ(dist.exit_code, 0) << dist.output;
  EXPECT_EQ(dist.output.find("same-host transfers go through MPI"), std::string::npos) << dist.output;
  JobResult ref = run_shell(pipedream_binary() + args + " --reference --save " + dir +
                            "/ref.safetensors --metrics " + dir + "/ref.jsonl");
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  auto a = load_by_name(dir + "/dist.safetensors"), b = load_by_name(dir + "/ref.safetensors");
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (auto& [name, t] : a) {
    ASSERT_TRUE(b.count(name)) << name;
    EXPECT_TRUE(same_bits(t, b[name])) << "tensor " << name << " differs from the reference";
  }
  EXPECT_EQ(step_losses(dir + "/dist.jsonl"), step_losses(dir + "/ref.jsonl"));
  EXPECT_TRUE(left_behind(before).empty()) << *left_behind(before).begin();
}

TEST(ShmRun, KilledJobLeavesNothingInDevShm) {
  const auto before = shm_entries();
  JobResult r = run_shell(std::string(PD_MPIEXEC) + " --allow-run-as-root --oversubscribe -np 3 " +
                              PD_COMM_FAULT_VICTIM + " kill",
                          60);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(left_behind(before).empty()) << *left_behind(before).begin();
}

std::string bench_comm(const std::string& env, const std::string& flags = "") {
  return "env " + env + " " + mpirun(2) + pipedream_binary() +
         " bench-comm --p2p-sizes 100KB --allreduce-sizes 100KB --latency-iters 5 --jsonl -" + flags;
}

// The "path" fields of bench-comm's JSON lines of one kind.
std::set<std::string> paths(const std::string& output, const std::string& kind) {
  std::set<std::string> found;
  std::istringstream lines(output);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty() || line[0] != '{') continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("kind", "") == kind) found.insert(j.value("path", "?"));
  }
  return found;
}
using Paths = std::set<std::string>;

TEST(ShmRun, BenchCommSaysWhichPathItUsed) {
  JobResult shm = run_shell(bench_comm("PIPEDREAM_SHM_RING_BYTES=65536"));
  ASSERT_EQ(shm.exit_code, 0) << shm.output;
  EXPECT_EQ(paths(shm.output, "p2p"), Paths{"shm"}) << shm.output;
  EXPECT_EQ(paths(shm.output, "allreduce"), Paths{"shm"}) << shm.output;
  JobResult forced = run_shell(bench_comm("PIPEDREAM_SHM_RING_BYTES=65536", " --same-host mpi"));
  ASSERT_EQ(forced.exit_code, 0) << forced.output;
  EXPECT_EQ(paths(forced.output, "p2p"), Paths{"mpi"}) << forced.output;
  EXPECT_EQ(paths(forced.output, "allreduce"), Paths{"mpi"}) << forced.output;
}

TEST(ShmRun, SegmentThatDoesNotFitFallsBackToMpiWithANote) {
  // Rings of 1 TiB per pair cannot fit in /dev/shm: one line names why,
  // and MPI carries everything.
  const auto before = shm_entries();
  JobResult r = run_shell(bench_comm("PIPEDREAM_SHM_RING_BYTES=1099511627776"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("pipedream: note: same-host transfers go through MPI: /dev/shm has "), std::string::npos)
      << r.output;
  EXPECT_EQ(paths(r.output, "p2p"), Paths{"mpi"}) << r.output;
  EXPECT_TRUE(left_behind(before).empty()) << *left_behind(before).begin();
}

TEST(ShmRun, BadRingSizeIsNamed) {
  JobResult r = run_shell(bench_comm("PIPEDREAM_SHM_RING_BYTES=12"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PIPEDREAM_SHM_RING_BYTES must be a byte count of at least 4096, got '12'"),
            std::string::npos)
      << r.output;
}

TEST(ShmRun, BadCoreHandoffSwitchIsNamed) {
  JobResult r = run_shell(bench_comm("PIPEDREAM_CORE_HANDOFF=yes"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("PIPEDREAM_CORE_HANDOFF must be auto, on or off, got 'yes'"), std::string::npos)
      << r.output;
}

}  // namespace
}  // namespace pd::testing
