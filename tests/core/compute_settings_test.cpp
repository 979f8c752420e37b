// apply_compute_settings: once per process. Each case runs in a child
// process (EXPECT_EXIT), so that what it applies does not reach the other
// tests of this binary.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/compute_settings.h"
#include "core/error.h"

namespace pd {
namespace {

ComputeSettings two_threads_bf16() {
  ComputeSettings s;
  s.threads = 2;
  s.precision = Precision::BF16;
  return s;
}

// Exits 0 when `check` holds, else prints why and exits 1.
template <class F>
void exit_with(F check) {
  try {
    const std::string failure = check();
    if (failure.empty()) std::exit(0);
    std::fprintf(stderr, "%s\n", failure.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
  }
  std::exit(1);
}

TEST(ComputeSettings, AppliedOnceSetsTheThreadsAndRecordsTheSettings) {
  EXPECT_EXIT(exit_with([] {
                if (applied_compute_settings()) return std::string("settings applied before apply");
                apply_compute_settings(two_threads_bf16());
                const ComputeSettings* s = applied_compute_settings();
                if (!s || !(*s == two_threads_bf16())) return std::string("the applied settings are not recorded");
                if (compute_threads() != 2) return "compute threads " + std::to_string(compute_threads());
                apply_compute_settings(two_threads_bf16());  // the same again: nothing to do
                return std::string();
              }),
              ::testing::ExitedWithCode(0), "");
}

TEST(ComputeSettings, ASecondDifferentApplicationIsRefusedAndChangesNothing) {
  EXPECT_EXIT(exit_with([] {
                apply_compute_settings(two_threads_bf16());
                std::vector<ComputeSettings> others(3, two_threads_bf16());
                others[0].threads = 3;
                others[1].precision = Precision::FP32;
                others[2].deterministic = true;
                for (const ComputeSettings& other : others) {
                  try {
                    apply_compute_settings(other);
                    return "a second application with " + describe(other) + " was accepted";
                  } catch (const RuntimeFailure& e) {
                    const std::string m = e.what();
                    if (m.find(describe(two_threads_bf16())) == std::string::npos ||
                        m.find(describe(other)) == std::string::npos)
                      return "the refusal does not name both settings: " + m;
                  }
                }
                if (compute_threads() != 2) return "compute threads changed to " + std::to_string(compute_threads());
                if (!(*applied_compute_settings() == two_threads_bf16())) return std::string("the record changed");
                return std::string();
              }),
              ::testing::ExitedWithCode(0), "");
}

TEST(ComputeSettings, BadValuesAreUserErrorsAndLeaveNothingApplied) {
  EXPECT_EXIT(exit_with([] {
                ComputeSettings none = two_threads_bf16();
                none.threads = 0;
                ComputeSettings tf32_on_cpu = two_threads_bf16();
                tf32_on_cpu.allow_tf32 = true;
                for (const ComputeSettings& bad : {none, tf32_on_cpu}) {
                  try {
                    apply_compute_settings(bad);
                    return "accepted " + describe(bad);
                  } catch (const UserError&) {
                  }
                  if (applied_compute_settings()) return "a refused " + describe(bad) + " was recorded";
                }
                apply_compute_settings(two_threads_bf16());  // the first good one still applies
                return compute_threads() == 2 ? std::string() : std::string("not applied after a refusal");
              }),
              ::testing::ExitedWithCode(0), "");
}

TEST(ComputeSettings, DescribeNamesEverySetting) {
  ComputeSettings s = two_threads_bf16();
  s.deterministic = true;
  EXPECT_EQ(describe(s), "cpu, 2 threads, bf16, deterministic");
  EXPECT_EQ(describe(ComputeSettings{}), "cpu, 1 thread, fp32");
}

}  // namespace
}  // namespace pd
