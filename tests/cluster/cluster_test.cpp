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
#include <sstream>
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

// mlp on synthetic data: wide layers on small batches, so that compute
// outweighs the shaped link's messages and the plan uses all 4 workers
// (2-2: each stage's replicas share a host), yet quick on 2 shared cores.
const std::string kModel = " --model mlp --model-options hidden=1024,depth=3 --batch 4";
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
    for (const auto& level : t["levels"]) {
      EXPECT_GT(level.value("latency_us", 0.0), 0.0) << "no per-message latency measured:\n" << bench.output;
      EXPECT_GT(level.value("allreduce_GBps", 0.0), 0.0) << "no all-reduce bandwidth measured:\n" << bench.output;
    }
  }
  JobResult prof = run_shell(pipedream_binary() + " profile" + kModel + " --threads 1 --iters 3 -o " + profile, 120);
  EXPECT_EQ(prof.exit_code, 0) << prof.output;
  JobResult p = run_shell(pipedream_binary() + " plan --profile " + profile + " --topology " + topo + " -o " + plan);
  EXPECT_EQ(p.exit_code, 0) << p.output;
  const nlohmann::json pj = read_json(plan);
  EXPECT_TRUE(pj.contains("topology") && pj["topology"]["levels"].size() == 2) << p.output;
  int workers = 0;
  for (const auto& st : pj.value("stages", nlohmann::json::array())) workers += st.value("replicas", 0);
  EXPECT_EQ(workers, 4) << p.output;
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
  // The placement is printed: ranks 0-1 on host 0, 2-3 on host 1, as the
  // plan's topology numbers them.
  EXPECT_NE(run.output.find("ctr-h0: ranks 0 1"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("warning: the plan's topology"), std::string::npos) << run.output;
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

  // Started without mpirun on host 0, with the hostfile: it launches itself across the hosts.
  JobResult self = run_shell(kMpiAsRoot + kScript + " exec ctr-h0 -- " + pipedream_binary() + args +
                                 " --hostfile /run/pipedream-cluster/ctr/hostfile --save " + dir + "/self.safetensors", 150);
  ASSERT_EQ(self.exit_code, 0) << self.output;
  EXPECT_NE(self.output.find("ctr-h1: ranks 2 3"), std::string::npos) << self.output;
  auto self_weights = load_by_name(dir + "/self.safetensors");
  ASSERT_EQ(self_weights.size(), b.size());
  for (auto& [n, t] : self_weights) EXPECT_TRUE(same_bits(t, b[n])) << "--hostfile run: tensor " << n << " differs from --reference";
}

}  // namespace
}  // namespace pd::testing

namespace pd::testing {
namespace {

// The largest N of the folder's step-N checkpoints (-1: none).
int64_t last_checkpoint_step(const std::string& dir) {
  int64_t last = -1;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename();
    if (std::regex_match(name, std::regex("step-[0-9]+"))) last = std::max<int64_t>(last, std::stoll(name.substr(5)));
  }
  return last;
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

// Host 1's processes (its Open MPI daemon and ranks 2 and 3) are killed
// mid-run: the job ends well within the timeout, non-zero, naming the host;
// every checkpoint left is whole; --resume on the restored cluster trains
// on to the bits of an uninterrupted run.
TEST(ClusterFault, HostKilledEndsTheJobNamingItAndResumeContinues) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string dir = scratch_dir("cluster_fault");
  Cluster c("ctf", "1gbit");
  ASSERT_TRUE(c.up()) << c.up_output();
  write_text(dir + "/plan.json", kPlan1111);
  const std::string ck = dir + "/ck", metrics = dir + "/m.jsonl", out = dir + "/out.txt";
  const std::string common = " run --plan " + dir + "/plan.json" +
                             " --model mlp --model-options hidden=24,depth=3 --data synthetic --seed 3 --no-eval"
                             " --threads-per-worker 1 --batch 8 --timeout 10";
  const std::string checkpoints = " --checkpoint-every 10 --checkpoint-dir " + ck;
  const std::string cmd = c.mpirun(4) + pipedream_binary() + common + checkpoints + " --minibatches 100000 --log-every 1 --metrics " + metrics;
  const pid_t job = start_background_job(cmd, out);
  ASSERT_GE(job, 0);
  for (int i = 0; i < 900 && (step_losses(metrics + ".partial").size() < 25 || last_checkpoint_step(ck) < 10); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GE(last_checkpoint_step(ck), 10) << "the job did not train:\n" << read_text(out);
  const auto killed_at = std::chrono::steady_clock::now();
  JobResult kill = c.script("kill " + c.host(1));
  ASSERT_EQ(kill.exit_code, 0) << kill.output;
  int status = 0;
  if (!wait_background_job(job, 60, &status))  // 60 s: far more than the 10 s timeout
    FAIL() << "the job hung after host 1 died:\n" << read_text(out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - killed_at).count();
  // The notice comes from the launch agent of host 1 (cluster.sh agent), a
  // child of mpirun that mpirun does not wait for: it may write after
  // mpirun has exited.
  const std::string notice = "host " + c.host(1) + " failed";
  for (int i = 0; i < 50 && read_text(out).find(notice) == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const std::string output = read_text(out);
  EXPECT_TRUE(!WIFEXITED(status) || WEXITSTATUS(status) != 0) << output;
  EXPECT_LT(seconds, 30) << output;
  EXPECT_NE(output.find(notice), std::string::npos) << output;
  EXPECT_NE(output.find(c.host(1) + ": ranks 2 3"), std::string::npos) << "placement not printed:\n" << output;

  // Nothing half-written: every step-N is a whole checkpoint and `latest`
  // names one; a checkpoint the fault interrupted is only a step-N.partial
  // folder, and an interrupted update of `latest` only its temporary file,
  // which nothing reads. (`latest` is one behind when the fault fell
  // between a commit's rename and its update: resume takes the newest
  // whole step-N, below.)
  const int64_t last = last_checkpoint_step(ck);
  for (const auto& e : std::filesystem::directory_iterator(ck)) {
    const std::string name = e.path().filename();
    if (std::regex_match(name, std::regex("step-[0-9]+\\.partial|latest\\.tmp\\..*"))) continue;
    if (name == "latest") {
      std::string named;
      std::istringstream(read_text(e.path())) >> named;
      EXPECT_TRUE(std::filesystem::exists(ck + "/" + named + "/state.json")) << "latest names " << named;
      continue;
    }
    EXPECT_EQ(name.rfind("step-", 0), 0u) << "left in the checkpoint folder: " << name;
    EXPECT_TRUE(std::filesystem::exists(e.path() / "state.json")) << name << " has no state.json";
    for (int s = 0; s < 4; ++s)
      EXPECT_TRUE(std::filesystem::exists(e.path() / ("stage-" + std::to_string(s) + ".safetensors"))) << name;
  }

  // The cluster restored (down and up again), the run resumes.
  Cluster restored("ctf", "1gbit");
  ASSERT_TRUE(restored.up()) << "the cluster could not be made again after host 1 was killed:\n"
                             << restored.up_output() << "\nnamespaces:\n" << run_shell("ip netns list").output
                             << "processes:\n" << run_shell("ps -eo pid,stat,args | grep -E 'pipedream|orted|mpirun' | grep -v grep").output;
  const std::string total = std::to_string(last + 6);
  JobResult resumed = run_shell(restored.mpirun(4) + pipedream_binary() + common + checkpoints + " --minibatches " + total +
                                    " --resume " + ck + " --save " + dir + "/resumed.safetensors", 120);
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_NE(resumed.output.find("/step-" + std::to_string(last) + " (step " + std::to_string(last) + " of " + total),
            std::string::npos)
      << resumed.output;
  JobResult ref = run_shell(pipedream_binary() + common + " --minibatches " + total + " --reference --save " + dir +
                            "/ref.safetensors", 120);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  auto a = load_by_name(dir + "/resumed.safetensors"), b = load_by_name(dir + "/ref.safetensors");
  ASSERT_FALSE(a.empty());
  for (auto& [n, t] : a) EXPECT_TRUE(same_bits(t, b[n])) << "tensor " << n << " differs from the uninterrupted run";
}

}  // namespace
}  // namespace pd::testing

namespace pd::testing {
namespace {

// cnn in four stages, one per rank: ranks 0-1 on host 0, 2-3 on host 1.
constexpr const char* kCnnPlan1111 = R"({"format": "pipedream-plan/1", "config": "1-1-1-1", "stages": [
  {"index": 0, "layers": [0, 1], "replicas": 1, "ranks": [0]},
  {"index": 1, "layers": [2, 4], "replicas": 1, "ranks": [1]},
  {"index": 2, "layers": [5, 7], "replicas": 1, "ranks": [2]},
  {"index": 3, "layers": [8, 9], "replicas": 1, "ranks": [3]}]})";

// Slurm (slurmctld, a slurmd per host, munge): `srun --mpi=pmix -N 2 -n 4
// pipedream run` trains cnn for 50 minibatches without relaunching itself
// (ranks from Slurm's environment) and equals --reference; so does the
// README's sbatch script.
TEST(ClusterSlurm, SrunAndSbatchTrainLikeTheReference) {
  SKIP_WITHOUT_NAMESPACES();
  if (run_shell("sh -c 'command -v slurmd && command -v munged && command -v srun'").exit_code != 0)
    GTEST_SKIP() << "Slurm is not installed (apt-get install slurm-wlm munge; scripts/setup.sh installs them)";
  const std::string dir = scratch_dir("cluster_slurm");
  write_text(dir + "/plan.json", kCnnPlan1111);
  JobResult up = run_shell(kScript + " up --name cts --hosts 2 --slots 2 --slurm", 90);
  struct Down {
    ~Down() { run_shell(kScript + " down --name cts", 60); }
  } down;
  ASSERT_EQ(up.exit_code, 0) << up.output;
  const std::string bin = std::string(PD_BINARY_DIR) + "/bin";
  const std::string args = " run --plan " + dir + "/plan.json --model cnn --data synthetic --batch 16 --minibatches 50"
                           " --no-eval --threads-per-worker 1 --seed 1";
  JobResult srun = run_shell("env PATH=" + bin + ":$PATH " + kScript + " exec cts-h0 -- srun --mpi=pmix -N 2 -n 4 pipedream" +
                                 args + " --save " + dir + "/srun.safetensors", 150);
  ASSERT_EQ(srun.exit_code, 0) << srun.output;
  EXPECT_EQ(srun.output.find("launching"), std::string::npos) << "pipedream relaunched itself under Slurm:\n" << srun.output;
  EXPECT_NE(srun.output.find("cts-h1: ranks 2 3"), std::string::npos) << srun.output;
  EXPECT_NE(srun.output.find("trained 50 steps on 4 workers"), std::string::npos) << srun.output;

  write_text(dir + "/train.sbatch", "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks=4\n#SBATCH --ntasks-per-node=2\n"
                                    "#SBATCH --output=" + dir + "/sbatch.out\n"
                                    "srun --mpi=pmix pipedream" + args + " --save " + dir + "/sbatch.safetensors\n");
  JobResult sbatch = run_shell("env PATH=" + bin + ":$PATH " + kScript + " exec cts-h0 -- sbatch --wait " + dir +
                                   "/train.sbatch", 150);
  EXPECT_EQ(sbatch.exit_code, 0) << sbatch.output << read_text(dir + "/sbatch.out");

  JobResult ref = run_shell(pipedream_binary() + args + " --reference --save " + dir + "/ref.safetensors", 120);
  ASSERT_EQ(ref.exit_code, 0) << ref.output;
  auto r = load_by_name(dir + "/ref.safetensors");
  ASSERT_FALSE(r.empty());
  for (const std::string run : {"srun", "sbatch"}) {
    auto a = load_by_name(dir + "/" + run + ".safetensors");
    ASSERT_EQ(a.size(), r.size()) << run;
    for (auto& [n, t] : a) EXPECT_TRUE(same_bits(t, r[n])) << run << ": tensor " << n << " differs from --reference";
  }
}

}  // namespace
}  // namespace pd::testing

namespace pd::testing {
namespace {

// Host 1's link taken down mid-run: mpirun loses its daemon there (TCP
// keepalive, which cluster.sh sets to seconds) and ends the job, naming the
// host, well within the workers' timeout.
TEST(ClusterFault, LinkDownEndsTheJobNamingTheHost) {
  SKIP_WITHOUT_NAMESPACES();
  const std::string dir = scratch_dir("cluster_link");
  Cluster c("ctl", "1gbit");
  ASSERT_TRUE(c.up()) << c.up_output();
  write_text(dir + "/plan.json", kPlan1111);
  const std::string metrics = dir + "/m.jsonl", out = dir + "/out.txt";
  const std::string cmd = c.mpirun(4) + pipedream_binary() + " run --plan " + dir + "/plan.json" +
                          " --model mlp --model-options hidden=24,depth=3 --data synthetic --seed 3 --no-eval"
                          " --threads-per-worker 1 --batch 8 --timeout 20 --minibatches 100000 --log-every 1 --metrics " +
                          metrics;
  const pid_t job = start_background_job(cmd, out);
  ASSERT_GE(job, 0);
  for (int i = 0; i < 900 && step_losses(metrics + ".partial").size() < 25; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const auto cut_at = std::chrono::steady_clock::now();
  JobResult cut = c.script("link " + c.host(1) + " down");
  ASSERT_EQ(cut.exit_code, 0) << cut.output;
  int status = 0;
  if (!wait_background_job(job, 90, &status))
    FAIL() << "the job hung after host 1's link went down:\n" << read_text(out);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - cut_at).count();
  const std::string output = read_text(out);
  EXPECT_TRUE(!WIFEXITED(status) || WEXITSTATUS(status) != 0) << output;
  EXPECT_LT(seconds, 40) << output;
  EXPECT_NE(output.find("on node " + c.host(1)), std::string::npos) << output;
}

}  // namespace
}  // namespace pd::testing
