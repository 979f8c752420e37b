// A cluster of 2 hosts x 2 workers on this machine (scripts/cluster.sh:
// network namespaces joined by tbf-shaped veth links): bench-comm measures a
// two-level topology, plan reads it, run trains across the hosts under
// mpirun with the cluster's hostfile and equals --reference; a host's
// processes killed mid-run end the job, naming the host, and --resume
// continues; `down` leaves nothing behind. Skips where namespaces cannot be
// made (not root, no iproute2).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "../integration/run_job.h"

namespace pd::testing {
namespace {

const std::string kScript = std::string(PD_SOURCE_DIR) + "/scripts/cluster.sh";
const std::string kMpiAsRoot = "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ";

// Empty when a network namespace can be made here, else why not.
std::string why_no_namespaces() {
  const std::string probe = "pdprobe" + std::to_string(::getpid() % 100000);
  JobResult r = run_shell("sh -c 'ip netns add " + probe + " && ip netns del " + probe + "'", 20);
  return r.exit_code == 0 ? "" : r.output.empty() ? "ip netns add failed" : r.output;
}

#define SKIP_WITHOUT_NAMESPACES()                                                                    \
  do {                                                                                               \
    const std::string why = why_no_namespaces();                                                     \
    if (!why.empty())                                                                                \
      GTEST_SKIP() << "network namespaces cannot be made here (scripts/cluster.sh needs root and "   \
                      "iproute2): "                                                                  \
                   << why;                                                                           \
  } while (0)

// One cluster for one test, taken down however the test ends (ctest's
// cluster_teardown removes it too if the test process dies).
class Cluster {
 public:
  Cluster(std::string name, const std::string& rate) : name_(std::move(name)) {
    JobResult r = run_shell(kScript + " up --name " + name_ + " --hosts 2 --slots 2 --rate " + rate, 60);
    up_ = r.exit_code == 0;
    up_output_ = r.output;
  }
  ~Cluster() { run_shell(kScript + " down --name " + name_, 60); }
  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;

  bool up() const { return up_; }
  const std::string& up_output() const { return up_output_; }
  std::string host(int i) const { return name_ + "-h" + std::to_string(i); }
  // mpirun on host 0 with the cluster's hostfile.
  std::string mpirun(int ranks) const {
    return kMpiAsRoot + "PD_CLUSTER_NAME=" + name_ + " " + kScript + " mpirun --bind-to none -np " +
           std::to_string(ranks) + " ";
  }
  JobResult script(const std::string& args, int timeout_s = 60) const {
    return run_shell("env PD_CLUSTER_NAME=" + name_ + " " + kScript + " " + args, timeout_s);
  }

 private:
  std::string name_;
  bool up_ = false;
  std::string up_output_;
};

// What a cluster named `name` could leave behind, one line per thing found.
std::string leftovers(const std::string& name) {
  std::string found;
  JobResult ns = run_shell("ip netns list");
  if (std::regex_search(ns.output, std::regex("(^|\n)" + name + "-"))) found += "namespaces:\n" + ns.output;
  JobResult links = run_shell("ip -o link show");
  if (links.output.find(name + "-") != std::string::npos) found += "links:\n" + links.output;
  JobResult qdiscs = run_shell("tc qdisc show");
  if (qdiscs.output.find("tbf") != std::string::npos && qdiscs.output.find(name) != std::string::npos)
    found += "qdiscs:\n" + qdiscs.output;
  if (std::filesystem::exists("/run/pipedream-cluster/" + name)) found += "state folder /run/pipedream-cluster/" + name + "\n";
  for (int i = 0; i < 2; ++i)
    if (std::filesystem::exists("/etc/netns/" + name + "-h" + std::to_string(i)))
      found += "/etc/netns/" + name + "-h" + std::to_string(i) + "\n";
  return found;
}

bool process_alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] != 'Z';
}

TEST(ClusterScript, DownLeavesNoNamespaceVethQdiscOrProcess) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string dir = scratch_dir("cluster_down");
  const std::string pid_file = dir + "/pid";
  {
    Cluster c("ctd", "200mbit");
    ASSERT_TRUE(c.up()) << c.up_output();
    JobResult status = c.script("status");
    EXPECT_NE(status.output.find("ctd-h1"), std::string::npos) << status.output;
    EXPECT_NE(status.output.find("200Mbit"), std::string::npos) << "tbf not on the link:\n" << status.output;
    // A process "on" host 1 that would outlive its job, as after a failed run.
    JobResult started = run_shell("sh -c '" + kScript + " exec ctd-h1 -- sh -c \"echo \\$\\$ > " + pid_file +
                                  "; exec sleep 300\" >/dev/null 2>&1 &'; sleep 1", 20);
    ASSERT_EQ(started.exit_code, 0) << started.output;
    pid_t pid = 0;
    for (int i = 0; i < 50 && pid == 0; ++i) {
      std::ifstream(pid_file) >> pid;
      if (pid == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ASSERT_GT(pid, 0) << "the process on ctd-h1 did not start";
    ASSERT_TRUE(process_alive(pid));
    JobResult down = c.script("down");
    EXPECT_EQ(down.exit_code, 0) << down.output;
    for (int i = 0; i < 20 && process_alive(pid); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(process_alive(pid)) << "process " << pid << " on ctd-h1 survived down";
    EXPECT_EQ(leftovers("ctd"), "");
    JobResult again = c.script("status");
    EXPECT_NE(again.output.find("down"), std::string::npos) << again.output;
  }
  EXPECT_EQ(leftovers("ctd"), "");
}

// mlp on synthetic data: small enough for 4 ranks on 2 shared cores.
const std::string kModel = " --model mlp --model-options hidden=64,depth=3 --batch 16";
const std::string kRunCommon = kModel + " --data synthetic --seed 3 --no-eval --threads-per-worker 1 --log-every 1";

nlohmann::json read_json(const std::string& path) {
  std::ifstream f(path);
  return nlohmann::json::parse(f, nullptr, false);
}

// bench-comm across the cluster writes a two-level topology (2 hosts x 2
// ranks, inter-host slower than intra-host); plan reads it.
std::string measure_and_plan(const Cluster& c, const std::string& dir) {
  const std::string topo = dir + "/topology.json", profile = dir + "/profile.json", plan = dir + "/plan.json";
  JobResult bench = run_shell(c.mpirun(4) + pipedream_binary() +
                                  " bench-comm --p2p-sizes 64KB,1MB,4MB --allreduce-sizes 4KB,1MB --latency-iters 30 "
                                  "--timeout 60 -o " + topo, 150);
  EXPECT_EQ(bench.exit_code, 0) << bench.output;
  const nlohmann::json t = read_json(topo);
  EXPECT_TRUE(t.contains("levels") && t["levels"].size() == 2) << "not a two-level topology:\n" << bench.output;
  if (t.contains("levels") && t["levels"].size() == 2) {
    EXPECT_EQ(t["levels"][0]["count"], 2);
    EXPECT_EQ(t["levels"][1]["count"], 2);
    EXPECT_GT(t["levels"][0]["bandwidth_GBps"].get<double>(), t["levels"][1]["bandwidth_GBps"].get<double>())
        << "shared memory inside a host measured slower than the shaped link between hosts:\n" << bench.output;
  }
  JobResult prof = run_shell(pipedream_binary() + " profile" + kModel + " --threads 1 --iters 3 -o " + profile, 120);
  EXPECT_EQ(prof.exit_code, 0) << prof.output;
  JobResult p = run_shell(pipedream_binary() + " plan --profile " + profile + " --topology " + topo + " -o " + plan);
  EXPECT_EQ(p.exit_code, 0) << p.output;
  const nlohmann::json pj = read_json(plan);
  EXPECT_TRUE(pj.contains("topology") && pj["topology"]["levels"].size() == 2) << p.output;
  return plan;
}

TEST(ClusterRun, TwoHostsByTwoWorkersPlannedFromMeasurementEqualReference) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string dir = scratch_dir("cluster_run");
  Cluster c("ctr", "1gbit");
  ASSERT_TRUE(c.up()) << c.up_output();
  const std::string plan = measure_and_plan(c, dir);
  ASSERT_FALSE(HasFailure());

  const std::string args = " run --plan " + plan + kRunCommon + " --minibatches 12 --timeout 60";
  JobResult run = run_shell(c.mpirun(4) + pipedream_binary() + args + " --save " + dir + "/run.safetensors --metrics " +
                                dir + "/run.jsonl", 150);
  ASSERT_EQ(run.exit_code, 0) << run.output;
  // The placement is printed: ranks 0-1 on host 0, 2-3 on host 1.
  EXPECT_NE(run.output.find("ctr-h0: ranks 0 1"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("ctr-h1: ranks 2 3"), std::string::npos) << run.output;
  JobResult ref = run_shell(pipedream_binary() + args + " --reference --save " + dir + "/ref.safetensors --metrics " +
                            dir + "/ref.jsonl", 120);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  auto a = load_by_name(dir + "/run.safetensors"), b = load_by_name(dir + "/ref.safetensors");
  ASSERT_FALSE(a.empty());
  ASSERT_EQ(a.size(), b.size());
  for (auto& [n, t] : a) EXPECT_TRUE(same_bits(t, b[n])) << "tensor " << n << " differs from --reference";
  // The reporter (the last stage's first replica) logs the steps it trained.
  const auto run_losses = step_losses(dir + "/run.jsonl"), ref_losses = step_losses(dir + "/ref.jsonl");
  EXPECT_GE(run_losses.size(), 4u);
  EXPECT_EQ(ref_losses.size(), 12u);
  for (auto [step, loss] : run_losses) EXPECT_EQ(loss, ref_losses.at(step)) << "step " << step;
}

}  // namespace
}  // namespace pd::testing
