// OpenBLAS starts a thread pool when it is loaded: commands that do no
// linear algebra must not load it (planning is a few milliseconds, and the
// pool's idle threads cost more than that), and those that do must still
// find it.
#include <gtest/gtest.h>

#include <string>

#include "tests/integration/run_job.h"

namespace pd::testing {
namespace {

// The dynamic loader lists every library it opens (LD_DEBUG=libs).
std::string libraries_opened(const std::string& arguments) {
  const JobResult r = run_shell("env LD_DEBUG=libs " + pipedream_binary() + " " + arguments);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return r.output;
}

TEST(BlasLoading, PlanDoesNotLoadOpenBlas) {
  const std::string out = libraries_opened(
      "plan --closed-form --workers 4 --bandwidth 1 --profile " PD_SOURCE_DIR
      "/tests/data/pipedream-profiles/vgg16/graph.txt");
  EXPECT_NE(out.find("Plan for"), std::string::npos) << out;
  EXPECT_NE(out.find("libpd_core"), std::string::npos) << "LD_DEBUG printed nothing: " << out;
  EXPECT_EQ(out.find("libopenblas"), std::string::npos) << out;
}

TEST(BlasLoading, VersionLoadsOpenBlasOnDemand) {
  const std::string out = libraries_opened("--version");
  EXPECT_NE(out.find("libopenblas"), std::string::npos) << out;
  EXPECT_NE(out.find("backends: cpu (OpenBLAS "), std::string::npos) << out;
}

}  // namespace
}  // namespace pd::testing
