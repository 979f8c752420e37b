// Fault handling of the MPI transport, seen from outside: run a job that
// fails on purpose under mpirun and check how it ends (exit code, message
// naming the failed rank, no hang).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <set>
#include <string>

namespace {

struct JobResult {
  int exit_code = -1;
  std::string output;
  double seconds = 0;
};

std::string mpirun_line(const std::string& mode, int ranks) {
  return std::string(PD_MPIEXEC) + " --allow-run-as-root --oversubscribe -np " + std::to_string(ranks) +
         " " + PD_COMM_FAULT_VICTIM + " " + mode;
}

JobResult run_shell(const std::string& script) {
  std::string cmd = "timeout -s KILL 60 sh -c '" + script + "' 2>&1";
  auto start = std::chrono::steady_clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  JobResult res;
  if (!p) return res;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) res.output.append(buf.data(), n);
  int status = pclose(p);
  res.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return res;
}

JobResult run_job(const std::string& mode, int ranks) { return run_shell(mpirun_line(mode, ranks)); }

// The victim waits with a 3 s timeout; the job must end well before the
// 60 s a hang would take (generous bound for a loaded 2-core machine).
constexpr double kNoHangSeconds = 30;

TEST(CommFault, KilledRankEndsTheJobNamingIt) {
  JobResult r = run_job("kill", 3);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, kNoHangSeconds) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
}

TEST(CommFault, SilentRankTimesOutAndIsNamed) {
  JobResult r = run_job("silent", 3);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, kNoHangSeconds) << r.output;
  EXPECT_NE(r.output.find("timed out after 3 s waiting for rank 1"), std::string::npos) << r.output;
}

TEST(CommFault, RankLeavingOnAnExceptionIsNamedByThePeers) {
  JobResult r = run_job("throw", 3);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, kNoHangSeconds) << r.output;
  EXPECT_NE(r.output.find("rank 1"), std::string::npos) << r.output;
}

TEST(CommFault, UnmatchedReceiveIsCancelledAtShutdown) {
  // The victim's timeout is 30 s: a shutdown that waited for the receive
  // instead of cancelling it would take that long (the victim also fails
  // itself past 10 s).
  JobResult r = run_job("unmatched", 2);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(r.seconds, 25) << r.output;
  EXPECT_NE(r.output.find("rank 0: the receive reports: receive tag 5 from rank 1: cancelled at shutdown"),
            std::string::npos)
      << r.output;
}

TEST(CommFault, CtrlCStopsEveryRankAfterTheSameStep) {
  // Ctrl-C reaches mpirun, which sends SIGTERM to every rank; the ranks
  // vote with any_rank_stopping() and all leave after the same step.
  JobResult r = run_shell(mpirun_line("stop", 3) + " & pid=$!; sleep 2; kill -INT $pid; wait $pid");
  EXPECT_LT(r.seconds, kNoHangSeconds) << r.output;
  std::set<std::string> steps;
  size_t pos = 0;
  int stopped = 0;
  while ((pos = r.output.find("stopped cleanly after step ", pos)) != std::string::npos) {
    pos += 27;
    steps.insert(r.output.substr(pos, r.output.find('\n', pos) - pos));
    ++stopped;
  }
  EXPECT_EQ(stopped, 3) << r.output;
  EXPECT_EQ(steps.size(), 1u) << r.output;
}

}  // namespace
