#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/error.h"
#include "runtime/launcher.h"

namespace pd {
namespace {

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

TEST(Launcher, MpirunCommandCarriesTheArgumentsAndTheRightFlags) {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  auto cmd = mpirun_command(cores + 1, {"run", "--plan", "p.json"});
  EXPECT_EQ(cmd.front(), "mpirun");
  EXPECT_TRUE(has(cmd, "--oversubscribe"));
  EXPECT_EQ(has(cmd, "--allow-run-as-root"), ::geteuid() == 0);
  auto np = std::find(cmd.begin(), cmd.end(), "-np");
  ASSERT_NE(np, cmd.end());
  EXPECT_EQ(*(np + 1), std::to_string(cores + 1));
  EXPECT_EQ(cmd[cmd.size() - 3], "run");
  EXPECT_EQ(cmd.back(), "p.json");
  EXPECT_FALSE(has(mpirun_command(1, {}), "--oversubscribe"));
  EXPECT_TRUE(has(cmd, "--quiet"));  // no exit-code banner: run_and_wait says what failed
}

TEST(Launcher, WrongWorldSizeIsAUserErrorWithBothNumbers) {
  EXPECT_NO_THROW(require_world_size(4, 4));
  try {
    require_world_size(4, 3);
    FAIL();
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("needs 4 workers but the MPI world has 3"), std::string::npos);
  }
}

// Stands in for mpirun: a shell whose "workers" leave reports where
// run_and_wait says (PIPEDREAM_ERROR_DIR), then exits with mpirun's code.
int run_fake_mpirun(const std::string& script, std::string* stderr_text) {
  ::testing::internal::CaptureStderr();
  const int code = run_and_wait({"sh", "-c", script});
  *stderr_text = ::testing::internal::GetCapturedStderr();
  return code;
}

std::string report(const std::string& file, int64_t at_ns, int exit_code, const std::string& message) {
  return "printf '%s' '" + std::to_string(at_ns) + " " + std::to_string(exit_code) + "\n" + message +
         "' > \"$PIPEDREAM_ERROR_DIR/" + file + "\"; ";
}

TEST(Launcher, TheFirstFailingWorkersErrorIsTheLastLineWithItsExitCode) {
  std::string err;
  // The echo on rank 1 is older than rank 0's own error: the cause still wins.
  const int code = run_fake_mpirun(report("worker-1.txt", 100, 1, "rank 0 aborted: exiting on an error") +
                                       report("worker-0.txt", 200, 2, "--plan p.json: bad stage") +
                                       report("worker-2.txt", 300, 1, "later failure") +
                                       "echo 'mpirun boilerplate' >&2; exit 7",
                                   &err);
  EXPECT_EQ(code, 2);
  EXPECT_EQ(err, "mpirun boilerplate\nerror: --plan p.json: bad stage\n");
  EXPECT_EQ(std::getenv("PIPEDREAM_ERROR_DIR"), nullptr);  // unset once the run is over
}

TEST(Launcher, WithoutReportsMpirunsExitCodeStandsAndIsNamed) {
  std::string err;
  EXPECT_EQ(run_fake_mpirun("echo killed >&2; exit 137", &err), 137);
  EXPECT_EQ(err, "killed\nerror: a worker failed without an error message (exit code 137: signal 9)\n");
  // A successful run says nothing more, whatever was left behind.
  EXPECT_EQ(run_fake_mpirun(report("worker-0.txt", 1, 2, "stale") + "exit 0", &err), 0);
  EXPECT_EQ(err, "");
}

// A worker under run_and_wait leaves its error for the launcher and prints
// nothing itself; anywhere else it must print (nobody else will).
TEST(Launcher, AWorkerReportsToTheLauncherOnlyWhenOneListens) {
  ASSERT_EQ(std::getenv("PIPEDREAM_ERROR_DIR"), nullptr);
  EXPECT_FALSE(report_error_to_launcher("bad", 2));
  const std::string dir = ::testing::TempDir() + "launcher_listens";
  std::filesystem::create_directories(dir);
  ::setenv("PIPEDREAM_ERROR_DIR", dir.c_str(), 1);
  EXPECT_TRUE(report_error_to_launcher("bad", 2));
  // An error without text still leaves one: the launcher skips empty reports.
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(report_error_to_launcher("", 1));
  for (const auto& f : std::filesystem::directory_iterator(dir)) {
    std::ifstream in(f.path());
    std::string header, text;
    std::getline(in, header);
    std::getline(in, text);
    EXPECT_EQ(text, "an error with no message (exit code 1)");
  }
  ::setenv("PIPEDREAM_ERROR_DIR", (dir + "/missing").c_str(), 1);  // another host's folder
  EXPECT_FALSE(report_error_to_launcher("bad", 2));
  ::unsetenv("PIPEDREAM_ERROR_DIR");
}

TEST(Launcher, TheReportsFolderIsRemovedAfterTheRun) {
  std::string err, dir_file = ::testing::TempDir() + "launcher_report_dir.txt";
  run_fake_mpirun("printf '%s' \"$PIPEDREAM_ERROR_DIR\" > " + dir_file + "; exit 1", &err);
  std::ifstream in(dir_file);
  std::string dir;
  std::getline(in, dir);
  ASSERT_FALSE(dir.empty());
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

// Where ranks run: one line per host; a group of the plan's innermost level
// split over hosts is a warning naming the ranks; one host says nothing.
TEST(Placement, NamesEachHostsRanksAndStagesAndWarnsOfSplitGroups) {
  const std::vector<std::vector<int>> stages = {{0}, {0}, {1}, {1}};
  EXPECT_EQ(placement_text({"h0", "h0", "h1", "h1"}, stages, 2),
            "  h0: ranks 0 1 (stage 0)\n  h1: ranks 2 3 (stage 1)\n");
  const std::string split = placement_text({"h0", "h1", "h0", "h1"}, stages, 2);
  EXPECT_NE(split.find("  h0: ranks 0 2 (stages 0 1)"), std::string::npos) << split;
  EXPECT_NE(split.find("warning: the plan's topology puts ranks 0..1 on one host, but they run on h0 and h1"),
            std::string::npos) << split;
  EXPECT_EQ(placement_text({"h0", "h0"}, {{0}, {1}}, 2), "");
}

// With a hostfile, mpirun fills each host's slots in rank order.
TEST(Placement, HostfileGoesToMpirunWithSlotMapping) {
  const auto cmd = mpirun_command(4, {"run"}, "hosts.txt");
  const auto at = std::find(cmd.begin(), cmd.end(), "--hostfile");
  ASSERT_NE(at, cmd.end());
  EXPECT_EQ(*(at + 1), "hosts.txt");
  EXPECT_NE(std::find(cmd.begin(), cmd.end(), "slot"), cmd.end());
  const auto plain = mpirun_command(4, {"run"});
  EXPECT_EQ(std::find(plain.begin(), plain.end(), "--hostfile"), plain.end());
}

}  // namespace
}  // namespace pd
