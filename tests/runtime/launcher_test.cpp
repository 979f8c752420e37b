#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
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

}  // namespace
}  // namespace pd
