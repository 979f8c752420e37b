// Every schedule name the commands print comes from the registry
// (runtime/schedule/schedule_kind.h): the help of run, plan, simulate and
// schedule, and each refusal a schedule can meet, walked for every entry.
#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <set>
#include <string>

#include "runtime/schedule/schedule.h"
#include "tests/integration/run_job.h"

namespace pd::testing {
namespace {

namespace fs = std::filesystem;

// Words shaped like a schedule's name (lower case: "1F1B" in prose is not one).
std::set<std::string> schedule_like_words(const std::string& text) {
  static const std::regex word(R"((?:^|[^\w-])((?:1f1b|zb|gpipe|2bw|interleaved|dualpipe|v-half|v-min)[\w-]*))");
  std::set<std::string> out;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), word); it != std::sregex_iterator(); ++it) {
    std::string w = (*it)[1];
    while (!w.empty() && w.back() == '-') w.pop_back();
    out.insert(w);
  }
  return out;
}

std::set<std::string> registry_names() {
  std::set<std::string> out;
  for (const ScheduleKind* k : schedule_kinds()) out.insert(k->name());
  return out;
}

void expect_only_registry_names(const std::string& text, const std::string& what) {
  const std::set<std::string> names = registry_names();
  for (const std::string& w : schedule_like_words(text))
    EXPECT_TRUE(names.count(w)) << what << " prints '" << w << "', which is no schedule in the registry:\n" << text;
}

std::string plan_json(int stages, int first_replicas) {
  std::string config = std::to_string(first_replicas);
  for (int s = 1; s < stages; ++s) config += "-1";
  std::string out = R"({"format": "pipedream-plan/1", "config": ")" + config +
                    R"(", "topology": {"levels": [{"count": 16, "bandwidth_GBps": 10}]}, "stages": [)";
  int rank = 0;
  for (int s = 0; s < stages; ++s) {
    const int r = s == 0 ? first_replicas : 1;
    std::string ranks;
    for (int k = 0; k < r; ++k) ranks += (k ? ", " : "") + std::to_string(rank++);
    out += (s ? ", " : "") + std::string(R"({"index": )") + std::to_string(s) + R"(, "layers": [)" +
           std::to_string(s) + ", " + std::to_string(s) + R"(], "replicas": )" + std::to_string(r) +
           R"(, "ranks": [)" + ranks + "]}";
  }
  return out + "]}";
}

class ScheduleNames : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = scratch_dir("schedule_names"); }
  void TearDown() override { fs::remove_all(dir_); }
  JobResult pipedream(const std::string& args) { return run_shell(pipedream_binary() + " " + args, 60); }
  std::string dir_;
};

TEST_F(ScheduleNames, HelpListsEveryScheduleAndNoOther) {
  for (const char* command : {"run", "plan", "simulate", "schedule"}) {
    const JobResult r = pipedream(std::string(command) + " --help");
    ASSERT_EQ(r.exit_code, 0) << r.output;
    expect_only_registry_names(r.output, std::string(command) + " --help");
    if (std::string(command) == "plan") continue;  // plan takes 1f1b-rr or auto
    for (const ScheduleKind* k : schedule_kinds()) {
      EXPECT_NE(r.output.find(k->name()), std::string::npos) << command << " --help lacks " << k->name();
      EXPECT_NE(r.output.find(k->help()), std::string::npos) << command << " --help lacks " << k->name() << "'s help";
    }
  }
}

// Each refusal of each entry: the flags that do not apply to it, the plans
// it cannot run, the features it lacks, and an unknown name.
TEST_F(ScheduleNames, EveryRefusalNamesRegistrySchedulesOnly) {
  write_text(dir_ + "/plan8.json", plan_json(8, 1));
  write_text(dir_ + "/replicated.json", plan_json(3, 2));
  write_text(dir_ + "/plan1.json", R"({"format": "pipedream-plan/1", "config": "1",
    "stages": [{"index": 0, "layers": [0, 7], "replicas": 1, "ranks": [0]}]})");  // the mlp's 8 layers
  const std::string model = " --model mlp --model-options hidden=8,depth=3 --data synthetic --batch 8 --minibatches 2";
  int refusals = 0;
  // `says`: what the refusal must be about (not some other mistake).
  auto refused = [&](const std::string& args, const std::string& what, const std::string& says) {
    const JobResult r = pipedream(args);
    EXPECT_EQ(r.exit_code, 2) << what << ": " << args << "\n" << r.output;
    EXPECT_NE(r.output.find(says), std::string::npos) << what << " should say '" << says << "':\n" << r.output;
    expect_only_registry_names(r.output, what);
    ++refusals;
    return r.output;
  };
  for (const ScheduleKind* k : schedule_kinds()) {
    const std::string name = k->name();
    const std::string schedule = "schedule --worker 0 --plan " + dir_ + "/plan8.json --schedule " + name;
    if (!k->flushes()) refused(schedule + " --microbatches 8", name + " --microbatches", "--microbatches applies to");
    if (!k->takes_weight_policy())
      refused(schedule + " --weights vertical", name + " --weights", "weight policy 'vertical' applies to");
    if (!k->takes_virtual_stages())
      refused(schedule + " --virtual-stages 2", name + " --virtual-stages", "virtual stages apply to");
    if (k->unreplicated_only())
      refused("schedule --worker 0 --plan " + dir_ + "/replicated.json --schedule " + name, name + " replicated",
              "runs unreplicated plans only");
    if (!k->splits_backward())  // (a grep site: the test asks each entry which refusals it meets)
      refused("simulate --plan " + dir_ + "/plan8.json --schedule " + name + " --weight-grad-share 0.3" +
                  (k->flushes() ? " --microbatches 8" : ""),
              name + " --weight-grad-share", "--weight-grad-share applies to");
    if (!k->checkpoints())
      refused("run --plan " + dir_ + "/plan1.json --schedule " + name + model + " --checkpoint-dir " + dir_ + "/ck",
              name + " --checkpoint-dir", "do not checkpoint or resume");
  }
  const std::string unknown = refused("schedule --worker 0 --plan " + dir_ + "/plan8.json --schedule nope",
                                      "an unknown schedule", "unknown schedule 'nope'");
  for (const ScheduleKind* k : schedule_kinds()) EXPECT_NE(unknown.find(k->name()), std::string::npos) << unknown;
  EXPECT_GE(refusals, static_cast<int>(schedule_kinds().size()));
}

}  // namespace
}  // namespace pd::testing
