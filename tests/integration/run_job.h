#pragma once
// Running `pipedream` (under mpirun or alone) from the integration tests.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/safetensors.h"

namespace pd::testing {

struct JobResult {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};

// Runs a shell command, killed after timeout_s; its output is stdout and stderr together.
inline JobResult run_shell(const std::string& command, int timeout_s = 120) {
  const std::string cmd = "timeout -s KILL " + std::to_string(timeout_s) + " " + command + " 2>&1";
  const auto start = std::chrono::steady_clock::now();
  JobResult res;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return res;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) res.output.append(buf.data(), n);
  const int status = pclose(p);
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

// Starts `command` under sh in a process group of its own (so that the
// whole job can be killed), stdout and stderr to out_path; -1 if fork fails.
inline pid_t start_background_job(const std::string& command, const std::string& out_path) {
  const pid_t job = fork();
  if (job == 0) {
    setpgid(0, 0);
    execl("/bin/sh", "sh", "-c", ("exec " + command + " < /dev/null > " + out_path + " 2>&1").c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  return job;
}

// Waits up to timeout_s for a job of start_background_job, its wait status
// in *status; false (its process group killed) when it had not ended.
inline bool wait_background_job(pid_t job, int timeout_s, int* status) {
  for (int i = 0; i < timeout_s * 10; ++i) {
    if (waitpid(job, status, WNOHANG) == job) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ::kill(-job, SIGKILL);
  waitpid(job, status, 0);
  return false;
}

// The 8-layer plans the integration tests share: four single stages, and
// a replicated first stage.
inline constexpr const char* kPlan1111 = R"({"format": "pipedream-plan/1", "config": "1-1-1-1", "stages": [
  {"index": 0, "layers": [0, 1], "replicas": 1, "ranks": [0]},
  {"index": 1, "layers": [2, 3], "replicas": 1, "ranks": [1]},
  {"index": 2, "layers": [4, 5], "replicas": 1, "ranks": [2]},
  {"index": 3, "layers": [6, 7], "replicas": 1, "ranks": [3]}]})";
inline constexpr const char* kPlan211 = R"({"format": "pipedream-plan/1", "config": "2-1-1", "stages": [
  {"index": 0, "layers": [0, 3], "replicas": 2, "ranks": [0, 1]},
  {"index": 1, "layers": [4, 5], "replicas": 1, "ranks": [2]},
  {"index": 2, "layers": [6, 7], "replicas": 1, "ranks": [3]}]})";

// A straight pipeline's trace (stage k on rank k): every forward of an
// item beside the same item's forward on the rank before, every backward
// beside the backward on the rank after. `early` names those that start
// before their input was finished: the ranks' clocks disagree.
struct TraceOrder {
  int pairs = 0;
  std::vector<std::string> early;
};
inline TraceOrder trace_order(const std::string& trace_path) {
  std::ifstream f(trace_path);
  const auto trace = nlohmann::json::parse(f);
  std::map<std::tuple<int, std::string, int64_t>, std::pair<double, double>> spans;  // start, end (us)
  for (const auto& e : trace["traceEvents"])
    if (e["ph"] == "X" && (e["cat"] == "F" || e["cat"] == "B"))
      spans[{e["pid"].get<int>(), e["cat"].get<std::string>(), e["args"]["item"].get<int64_t>()}] = {
          e["ts"].get<double>(), e["ts"].get<double>() + e["dur"].get<double>()};
  TraceOrder out;
  for (const auto& [key, span] : spans) {
    const auto& [rank, kind, item] = key;
    const int from = kind == "F" ? rank - 1 : rank + 1;  // where its input was made
    auto input = spans.find({from, kind, item});
    if (input == spans.end()) continue;
    ++out.pairs;
    if (span.first < input->second.second - 1.0)
      out.early.push_back(kind + " of item " + std::to_string(item) + " on rank " + std::to_string(rank) + " by " +
                          std::to_string(input->second.second - span.first) + " us");
  }
  return out;
}

inline std::string pipedream_binary() { return std::string(PD_BINARY_DIR) + "/bin/pipedream"; }

inline std::string mpirun(int ranks) {
  return std::string(PD_MPIEXEC) + " --allow-run-as-root --oversubscribe --bind-to none -np " + std::to_string(ranks) + " ";
}

// A fresh folder for one test's files.
// Per process as well as per name: ctest runs the tests of one fixture as
// separate processes in parallel, and a shared folder would be wiped by one
// test's setup while another runs in it.
inline std::string scratch_dir(const std::string& name) {
  const auto d = std::filesystem::temp_directory_path() /
                 ("pipedream_run_test_" + name + "_" + std::to_string(::getpid()));
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  return d.string();
}

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path);
  f << text;
}

// step -> loss from a metrics file.
inline std::map<int64_t, double> step_losses(const std::string& metrics_path) {
  std::map<int64_t, double> out;
  std::ifstream f(metrics_path);
  std::string line;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("event", "") == "step")  // a diverged loss is written as null
      out[j["step"].get<int64_t>()] = j["loss"].is_number() ? j["loss"].get<double>() : NAN;
  }
  return out;
}

inline std::vector<nlohmann::json> metric_lines(const std::string& metrics_path, const std::string& event) {
  std::vector<nlohmann::json> out;
  std::ifstream f(metrics_path);
  std::string line;
  while (std::getline(f, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.value("event", "") == event) out.push_back(j);
  }
  return out;
}

inline std::map<std::string, Tensor> load_by_name(const std::string& path) {
  std::map<std::string, Tensor> out;
  for (auto& [n, t] : load_safetensors(path)) out[n] = t;
  return out;
}

inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// What a run writes: its weights (--save) and its metrics (--metrics).
struct RunFiles {
  std::string save, metrics;
};

// Two runs ended with the same weights, bit for bit.
inline void expect_same_weights(const RunFiles& a, const RunFiles& b, const std::string& what) {
  auto wa = load_by_name(a.save), wb = load_by_name(b.save);
  ASSERT_FALSE(wa.empty()) << what;
  ASSERT_EQ(wa.size(), wb.size()) << what;
  for (auto& [n, t] : wa) {
    ASSERT_TRUE(wb.count(n)) << what << ": " << n;
    EXPECT_TRUE(same_bits(t, wb[n])) << what << ": tensor " << n << " differs";
  }
}

// The same weights, and the same loss at each of their `steps` steps.
inline void expect_same_bits(const RunFiles& a, const RunFiles& b, const std::string& what, size_t steps = 3) {
  expect_same_weights(a, b, what);
  auto la = step_losses(a.metrics), lb = step_losses(b.metrics);
  EXPECT_EQ(la.size(), steps) << what;
  EXPECT_EQ(la, lb) << what << ": per-step losses differ";
}

}  // namespace pd::testing
