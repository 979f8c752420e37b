// `pipedream schedule --format` -> edit -> `pipedream simulate --schedule-file`,
// and `simulate --svg`.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/plan.h"
#include "tests/integration/run_job.h"
#include "tests/schedule/plans.h"

namespace pd::testing {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

class ScheduleFileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = scratch_dir("schedule_file_cli");
    plan_ = dir_ + "/plan.json";
    write_text(plan_, plan_to_json(make_plan({1, 1, 1, 1}, 1.0, 2.0, 1000)).dump());
  }
  JobResult pipedream(const std::string& args) { return run_shell(pipedream_binary() + " " + args); }

  std::string dir_, plan_;
};

TEST_F(ScheduleFileCli, ExportedCsvAndJsonReplayToTheBuiltInReport) {
  const std::string flush = " --schedule 1f1b-flush --minibatches 3 --microbatches 4";
  const JobResult builtin = pipedream("simulate --json --plan " + plan_ + flush);
  ASSERT_EQ(builtin.exit_code, 0) << builtin.output;
  for (const char* format : {"csv", "json"}) {
    const std::string file = dir_ + "/s." + format;
    const JobResult exported = pipedream("schedule --plan " + plan_ + flush + " --format " + format + " -o " + file);
    ASSERT_EQ(exported.exit_code, 0) << exported.output;
    const JobResult replayed = pipedream("simulate --json --plan " + plan_ + " --schedule-file " + file);
    ASSERT_EQ(replayed.exit_code, 0) << replayed.output;
    EXPECT_EQ(replayed.output, builtin.output) << format;
  }
}

TEST_F(ScheduleFileCli, ADeadlockingEditExitsTwoNamingTheAction) {
  const JobResult csv = pipedream("schedule --plan " + plan_ + " --format csv --minibatches 6");
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  // Rank 0's first gradient receive moved to the front of its list.
  std::istringstream in(csv.output);
  std::string line, header, recv, rest;
  for (int n = 0; std::getline(in, line); ++n) {
    if (n < 2) header += line + "\n";
    else if (recv.empty() && line.rfind("0,0,RECV_B,", 0) == 0) recv = line + "\n";
    else rest += line + "\n";
  }
  ASSERT_FALSE(recv.empty()) << csv.output;
  write_text(dir_ + "/bad.csv", header + recv + rest);
  const JobResult r = pipedream("simulate --plan " + plan_ + " --schedule-file " + dir_ + "/bad.csv");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("the schedule is rejected: deadlock: rank 0 blocks forever at action 0 recv-grad(m=0)"),
            std::string::npos)
      << r.output;
}

TEST_F(ScheduleFileCli, TheFileExcludesScheduleOptions) {
  const JobResult csv = pipedream("schedule --plan " + plan_ + " --format csv -o " + dir_ + "/s.csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  const JobResult r =
      pipedream("simulate --plan " + plan_ + " --schedule-file " + dir_ + "/s.csv --schedule gpipe");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("excludes"), std::string::npos) << r.output;
}

TEST_F(ScheduleFileCli, SvgHasARowPerWorker) {
  const std::string svg = dir_ + "/t.svg";
  const JobResult r = pipedream("simulate --plan " + plan_ + " --minibatches 20 --svg " + svg + " --svg-minibatches 6");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string doc = read_text(svg);
  EXPECT_EQ(doc.rfind("<?xml", 0), 0u);
  int rows = 0;
  for (size_t at = doc.find("class=\"row\""); at != std::string::npos; at = doc.find("class=\"row\"", at + 1)) ++rows;
  EXPECT_EQ(rows, 4);
  EXPECT_NE(doc.find(">5</text>"), std::string::npos);
  EXPECT_NE(doc.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace pd::testing
