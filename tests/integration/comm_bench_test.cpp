// `pipedream bench-comm` end to end: run it under mpirun with small sizes
// and check the topology file and the JSON lines it writes.
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace {

int run(const std::string& cmd, std::string* output) {
  FILE* p = popen(("timeout -s KILL 120 " + cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) output->append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

const std::string kPipedream = std::string(PD_BINARY_DIR) + "/bin/pipedream";
const std::string kMpirun = std::string(PD_MPIEXEC) + " --allow-run-as-root --oversubscribe ";

TEST(CommBench, WritesTopologyInDesignFormatAndJsonLines) {
  const std::string dir = ::testing::TempDir();
  const std::string topo = dir + "/pd_bench_comm_topology.json", lines = dir + "/pd_bench_comm.jsonl";
  std::string out;
  int rc = run(kMpirun + "-np 3 " + kPipedream +
                   " bench-comm --p2p-sizes 4KB,64KB --allreduce-sizes 4KB,64KB --latency-iters 20 -o " +
                   topo + " --jsonl " + lines,
               &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("latency_us"), std::string::npos) << out;

  nlohmann::json t = nlohmann::json::parse(std::ifstream(topo));
  ASSERT_EQ(t["levels"].size(), 1u) << t;  // one host
  EXPECT_EQ(t["levels"][0]["count"], 3);
  EXPECT_GT(t["levels"][0]["bandwidth_GBps"].get<double>(), 0.0);
  EXPECT_GT(t["worker_memory_bytes"].get<double>(), 0.0);
  // The communication threads' CPU per byte and per message at one end
  // (what simulate --cores charges to the shared cores).
  EXPECT_GT(t["levels"][0].value("comm_cpu_GBps", 0.0), 0.0) << t;
  EXPECT_GT(t["levels"][0].value("comm_cpu_us_per_message", 0.0), 0.0) << t;

  std::ifstream in(lines);
  int p2p = 0, allreduce = 0, topology = 0;
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    p2p += j["kind"] == "p2p";
    if (j["kind"] == "p2p") EXPECT_TRUE(j.contains("comm_cpu_GBps") && j.contains("comm_cpu_us_per_message")) << j;
    if (j["kind"] == "allreduce") EXPECT_GE(j.value("rank0_comm_cpu_ms", -1.0), 0.0) << j;
    allreduce += j["kind"] == "allreduce";
    topology += j["kind"] == "topology";
  }
  EXPECT_EQ(p2p, 3 * 2);        // 3 pairs x 2 sizes
  EXPECT_EQ(allreduce, 2 * 2);  // groups of 2 and 3 x 2 sizes
  EXPECT_EQ(topology, 1);
}

TEST(CommBench, RefusesToRunOutsideMpiAndBadSizes) {
  std::string out;
  EXPECT_EQ(run(kPipedream + " bench-comm", &out), 2) << out;
  EXPECT_NE(out.find("mpirun"), std::string::npos) << out;
  out.clear();
  EXPECT_EQ(run(kMpirun + "-np 2 " + kPipedream + " bench-comm --p2p-sizes 12XB", &out), 2) << out;
  EXPECT_NE(out.find("12XB"), std::string::npos) << out;
}

}  // namespace
