// A GPT-2-style PyTorch module whose head weight IS its embedding weight
// (scripts/torch_models/transformer_lm.py GPT2 tie=True), exported by
// scripts/export_torch.py: `models` lists the tie group, the profile and
// the plan record it, a --straight plan on 4 workers puts the embedding and
// the head in different stages, and the run equals --reference bit for
// bit with the tied tensor saved once under its initializer's name.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/safetensors.h"
#include "tests/onnx/onnx_test_util.h"

namespace pd::onnx {
namespace {

using pd::testing::read_text;

int export_torch(const std::string& args, const std::string& log) {
  const std::string cmd = "cd " + std::string(PD_BINARY_DIR) + " && OMP_NUM_THREADS=1 " + pd::testing::kPython + " " +
                          PD_SOURCE_DIR + "/scripts/export_torch.py " + args + " >" + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(TiedImport, Gpt2WithItsHeadTiedToTheEmbeddingPipelinesOnFourStages) {
  PD_SKIP_WITHOUT_TORCH();
  const std::string d = pd::testing::scratch_dir("tied_gpt2");
  const std::string onnx = d + "/gpt2_tied.onnx";
  ASSERT_EQ(export_torch(cat(PD_SOURCE_DIR, "/scripts/torch_models/transformer_lm.py:GPT2 -o ", onnx,
                             " --tokens 8 --kwargs '{\"vocab\": 32, \"dim\": 16, \"heads\": 2, \"layers\": 2, "
                             "\"context\": 8, \"dropout\": 0.0, \"tie\": true}'"),
                         d + "/export.log"),
            0)
      << read_text(d + "/export.log");
  auto run = [&](const std::string& args, const std::string& log) {
    return pd::testing::run_pipedream(args, d + "/" + log);
  };
  ASSERT_EQ(run("models --model " + onnx, "models.log"), 0) << read_text(d + "/models.log");
  const std::string models = read_text(d + "/models.log");
  EXPECT_NE(models.find("tie groups"), std::string::npos) << models;
  EXPECT_NE(models.find("wte.weight"), std::string::npos) << models;

  ASSERT_EQ(run("profile --model " + onnx + " --batch 8 --threads 1 --warmup 0 --iters 1 --min-time 0 -o " + d +
                    "/profile.json",
                "profile.log"),
            0)
      << read_text(d + "/profile.log");
  const nlohmann::json profile = nlohmann::json::parse(read_text(d + "/profile.json"));
  ASSERT_EQ(profile.at("tie_groups").size(), 1u) << profile.dump();
  EXPECT_EQ(profile["tie_groups"][0].at("parameter"), "wte.weight");
  EXPECT_EQ(profile["tie_groups"][0].at("bytes"), 32 * 16 * 4);
  EXPECT_GE(profile["tie_groups"][0].at("nodes").size(), 2u);

  ASSERT_EQ(run("plan --profile " + d + "/profile.json --workers 4 --bandwidth 1 --straight -o " + d + "/plan.json",
                "plan.log"),
            0)
      << read_text(d + "/plan.log");
  const nlohmann::json plan = nlohmann::json::parse(read_text(d + "/plan.json"));
  ASSERT_EQ(plan.at("stages").size(), 4u) << plan.dump();
  ASSERT_EQ(plan.at("tie_groups").size(), 1u) << plan.dump();
  EXPECT_EQ(plan["tie_groups"][0].at("stages"), nlohmann::json({0, 3})) << plan.dump();
  EXPECT_GT(plan["tie_groups"][0].at("exchange_s").get<double>(), 0);

  const std::string common = "--model " + onnx + " --data synthetic --seed 5 --no-eval --batch 8 --minibatches 3 ";
  for (const std::string schedule : {"1f1b-flush --microbatches 2", "zb-h1 --microbatches 2"}) {
    const std::string flush = "--schedule " + schedule + " ";
    ASSERT_EQ(run("run --plan " + d + "/plan.json " + common + flush + "--save " + d + "/mpi.safetensors", "mpi.log"), 0)
        << read_text(d + "/mpi.log");
    ASSERT_EQ(run("run --plan " + d + "/plan.json --reference " + common + flush + "--save " + d + "/ref.safetensors",
                  "ref.log"),
              0)
        << read_text(d + "/ref.log");
    EXPECT_EQ(read_text(d + "/mpi.safetensors"), read_text(d + "/ref.safetensors")) << schedule;
    int tied = 0;
    for (const auto& [name, t] : load_safetensors(d + "/mpi.safetensors"))
      tied += name.size() >= 10 && name.compare(name.size() - 10, 10, "wte.weight") == 0;
    EXPECT_EQ(tied, 1) << schedule << ": the tied matrix is saved once";
  }
  // 1f1b-rr would update the two copies at different times.
  EXPECT_EQ(run("run --plan " + d + "/plan.json " + common + "--schedule 1f1b-rr", "rr.log"), 2) << read_text(d + "/rr.log");
  const std::string refusal = read_text(d + "/rr.log");
  for (const char* works : {"1f1b-flush", "gpipe", "zb-h1", "interleaved-1f1b"})
    EXPECT_NE(refusal.find(works), std::string::npos) << works << " not named in: " << refusal;
}

}  // namespace
}  // namespace pd::onnx
