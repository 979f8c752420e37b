// --save in Hugging Face's sharded layout (models/sharded_weights.h): a run
// of four stages writes one shard per stage, each by its stage's leader,
// and an index; the shards hold exactly what the single-file save holds,
// bit for bit; --init from the index (or from the path it was asked for)
// starts where --init from the single file does. And `train` refuses, before
// allocating, a model whose training state exceeds --memory.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "tests/integration/run_job.h"

namespace pd::testing {
namespace {

namespace fs = std::filesystem;

const std::string kModel = " --model mlp --model-options hidden=24,depth=3 --data synthetic --seed 3";

class ShardedSave : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = scratch_dir("sharded_save"); }
  void TearDown() override { fs::remove_all(dir_); }
  JobResult pipedream(const std::string& args) { return run_shell(pipedream_binary() + " " + args, 180); }
  std::string dir_;
};

TEST_F(ShardedSave, FourStagesWriteFourShardsAndAnIndexThatInitReads) {
  write_text(dir_ + "/plan.json", kPlan1111);
  const std::string run = "run --plan " + dir_ + "/plan.json" + kModel +
                          " --schedule 1f1b-flush --microbatches 2 --batch 8 --minibatches 2 --no-eval"
                          " --threads-per-worker 1 --save ";
  const JobResult merged = pipedream(run + dir_ + "/merged.safetensors");
  ASSERT_EQ(merged.exit_code, 0) << merged.output;
  const std::string index = dir_ + "/model.safetensors.index.json";
  const JobResult sharded = pipedream(run + index);
  ASSERT_EQ(sharded.exit_code, 0) << sharded.output;
  EXPECT_NE(sharded.output.find("index of 4 shards, one per stage"), std::string::npos) << sharded.output;

  // One shard per stage, holding that stage's layers only.
  const nlohmann::json j = nlohmann::json::parse(std::ifstream(index));
  const auto whole = load_by_name(dir_ + "/merged.safetensors");
  size_t tensors = 0;
  for (int s = 0; s < 4; ++s) {
    const std::string shard = "model-0000" + std::to_string(s + 1) + "-of-00004.safetensors";
    ASSERT_TRUE(fs::exists(dir_ + "/" + shard)) << shard;
    for (const auto& [name, t] : load_by_name(dir_ + "/" + shard)) {
      const int layer = std::stoi(name.substr(0, name.find('.')));
      EXPECT_TRUE(layer == 2 * s || layer == 2 * s + 1) << shard << " holds " << name;
      EXPECT_EQ(j["weight_map"][name], shard) << name;
      ASSERT_TRUE(whole.count(name)) << name;
      EXPECT_TRUE(same_bits(t, whole.at(name))) << name;
      ++tensors;
    }
  }
  EXPECT_EQ(tensors, whole.size());
  EXPECT_EQ(j["weight_map"].size(), whole.size());

  // --init from the index equals --init from the single file, bit for bit.
  const std::string train = "train" + kModel + " --batch 8 --minibatches 1 --no-eval --threads 1 --init ";
  const JobResult from_merged = pipedream(train + dir_ + "/merged.safetensors --save " + dir_ + "/a.safetensors");
  ASSERT_EQ(from_merged.exit_code, 0) << from_merged.output;
  const JobResult from_index = pipedream(train + index + " --save " + dir_ + "/b.safetensors");
  ASSERT_EQ(from_index.exit_code, 0) << from_index.output;
  const JobResult from_name = pipedream(train + dir_ + "/model.safetensors --save " + dir_ + "/c.safetensors");
  ASSERT_EQ(from_name.exit_code, 0) << from_name.output;
  const auto a = load_by_name(dir_ + "/a.safetensors"), b = load_by_name(dir_ + "/b.safetensors"),
             c = load_by_name(dir_ + "/c.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [name, t] : a) {
    EXPECT_TRUE(same_bits(t, b.at(name))) << name;
    EXPECT_TRUE(same_bits(t, c.at(name))) << name;
  }
}

TEST_F(ShardedSave, AnIndexNamingAFileOutsideItsFolderIsRefused) {
  write_text(dir_ + "/bad.safetensors.index.json",
             R"({"metadata": {"total_size": 4}, "weight_map": {"0.weight": "../x.safetensors"}})");
  const JobResult r = pipedream("train" + kModel + " --minibatches 1 --no-eval --init " + dir_ +
                                "/bad.safetensors.index.json");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("not a file name in the index's folder"), std::string::npos) << r.output;
}

TEST_F(ShardedSave, TrainRefusesATrainingStateOverMemoryBeforeAllocating) {
  // mlp hidden=24, depth=3 on Fashion-MNIST-sized inputs: ~20k parameters,
  // 4 copies under Adam: ~330 kB.
  const JobResult r = pipedream("train" + kModel + " --optimizer adam --minibatches 1 --no-eval --memory 100000");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("for its training state alone"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("2x for adam's state"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("pipedream plan --profile profile.json --workers "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("training mlp ("), std::string::npos) << "refused after starting: " << r.output;
  const JobResult fits = pipedream("train" + kModel + " --optimizer adam --minibatches 1 --no-eval --memory 10MB");
  EXPECT_EQ(fits.exit_code, 0) << fits.output;
}

}  // namespace
}  // namespace pd::testing
