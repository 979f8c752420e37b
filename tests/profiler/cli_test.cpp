// `pipedream profile` end to end: exit codes, messages, the profile file
// appearing only after success, and the file feeding `pipedream plan`.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "profiler/profile.h"

namespace pd {
namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out, err;
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ProfileCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("pd_profile_cli_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result run(const std::string& args) {
    const fs::path out = dir_ / "stdout.txt", err = dir_ / "stderr.txt";
    std::string cmd = std::string(PD_BINARY_DIR) + "/bin/pipedream " + args + " > " + out.string() + " 2> " +
                      err.string();
    int status = std::system(cmd.c_str());
    Result r;
    r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    r.out = slurp(out);
    r.err = slurp(err);
    return r;
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  // Cheap: the cnn on 2 samples, one thread, one measured iteration.
  std::string quick(const std::string& output) const {
    return "profile --model cnn --batch 2 --threads 1 --warmup 0 --iters 1 --min-time 0 -o " + output;
  }

  fs::path dir_;
};

TEST_F(ProfileCli, WritesAProfileAndPrintsTheTable) {
  Result r = run(quick(path("p.json")));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("fwd ms"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("measured whole step"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("sgd (momentum 0.9)"), std::string::npos) << r.out;
  Profile p = read_profile(path("p.json"));
  EXPECT_EQ(p.model, "cnn");
  EXPECT_EQ(p.batch_size, 2);
  EXPECT_EQ(p.threads, 1);
  EXPECT_TRUE(p.is_chain());
  EXPECT_GT(p.step_forward_backward_ms, 0);
  EXPECT_FALSE(fs::exists(path("p.json.tmp")));
}

TEST_F(ProfileCli, BadInputExitsTwoWithAMessageAndWritesNoFile) {
  const std::string out = path("bad.json");
  fs::path spec = dir_ / "broken.json";
  std::ofstream(spec) << "{\"name\": \"x\", \"layers\": [";
  struct Case {
    std::string args, message;
  } cases[] = {
      {"profile --model no-such-model --batch 2 -o " + out, "no-such-model"},
      {"profile --model cnn --batch 0 -o " + out, "--batch"},
      {"profile --model-spec " + path("missing.json") + " --batch 2 -o " + out, "missing.json"},
      {"profile --model-spec " + spec.string() + " --batch 2 -o " + out, "broken.json"},
      {"profile --model cnn --batch 2 --device cuda --iters 1 --warmup 0 -o " + out, "cuda"},
      {"profile --model cnn --batch 2 --device tpu -o " + out, "tpu"},
      {"profile --model cnn --batch 2 --iters 0 -o " + out, "--iters"},
      {"profile --model cnn --batch 2 --min-time -1 -o " + out, "--min-time"},
      {"profile --model cnn --batch 8 --microbatches 3 -o " + out, "--microbatches"},
      {"profile --batch 2 -o " + out, "--model"},
      {"profile --model cnn --batch 2 -o " + path("no/such/dir/p.json"), "no/such/dir"},
  };
  for (const Case& c : cases) {
    Result r = run(c.args);
    EXPECT_EQ(r.code, 2) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\nstderr: " << r.err;
    EXPECT_FALSE(fs::exists(out)) << c.args;
    EXPECT_FALSE(fs::exists(out + ".tmp")) << c.args;
  }
}

TEST_F(ProfileCli, PlanRecordsWhichProfileItCameFrom) {
  const std::string profile = path("p.json"), plan = path("plan.json");
  ASSERT_EQ(run(quick(profile)).code, 0);
  Result r = run("plan --profile " + profile + " --workers 2 --bandwidth 10 -o " + plan);
  ASSERT_EQ(r.code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(slurp(plan));
  const nlohmann::json& ref = j.at("profile");
  EXPECT_EQ(ref.at("path"), profile);
  EXPECT_EQ(ref.at("sha256"), sha256_hex(slurp(profile)));
  EXPECT_EQ(ref.at("model"), "cnn");
  EXPECT_EQ(ref.at("batch_size"), 2);
  EXPECT_EQ(ref.at("device"), "cpu");
}

}  // namespace
}  // namespace pd
