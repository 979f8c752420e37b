// An imported model through the whole CLI path: profile + plan (`run --plan
// auto`), a pipelined MPI run, and the same plan with --reference in one
// process - bit for bit the same weights, as for zoo models.
#include <gtest/gtest.h>

#include <fstream>

#include "core/safetensors.h"
#include "tests/onnx/onnx_test_util.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::onnx {
namespace {

using pd::testing::read_text;
using pd::testing::run_pipedream;

TEST(OnnxPipeline, PipelinedRunOfAnImportedModelEqualsTheReferenceBitwise) {
  const std::string dir = pd::testing::scratch_dir("pipeline");
  // Three top-level layers (conv+relu+residual add, flatten, gemm): two stages.
  std::ofstream(dir + "/small.onnx", std::ios::binary) << testing::encode(testing::small_model());
  const std::string common = "--model " + dir + "/small.onnx --data synthetic --batch 8 --minibatches 12 --no-eval --seed 3";
  ASSERT_EQ(run_pipedream("run --plan auto --workers 2 --straight --plan-out " + dir + "/plan.json " + common + " --save " + dir +
                    "/mpi.safetensors",
                dir + "/mpi.log"),
            0)
      << read_text(dir + "/mpi.log");
  ASSERT_EQ(run_pipedream("run --plan " + dir + "/plan.json --reference " + common + " --save " + dir + "/ref.safetensors",
                dir + "/ref.log"),
            0)
      << read_text(dir + "/ref.log");
  const NamedTensors a = load_safetensors(dir + "/mpi.safetensors"), b = load_safetensors(dir + "/ref.safetensors");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_EQ(a.size(), 4u);  // conv.weight, conv.bias, fc.weight, fc.bias under their ONNX names
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].first, b[k].first);
    EXPECT_NE(a[k].first.find(k < 2 ? "conv." : "fc."), std::string::npos) << a[k].first;
    ASSERT_EQ(a[k].second.numel(), b[k].second.numel());
    for (int64_t i = 0; i < a[k].second.numel(); ++i)
      ASSERT_EQ(a[k].second.f32()[i], b[k].second.f32()[i]) << a[k].first << "[" << i << "]";
  }
}

TEST(OnnxPipeline, OneFOneBFlushOfAnImportedModelEqualsTrainingOnTheWholeBatch) {
  const std::string dir = pd::testing::scratch_dir("pipeline_flush");
  std::ofstream(dir + "/small.onnx", std::ios::binary) << testing::encode(testing::small_model());
  const std::string model = "--model " + dir + "/small.onnx --data synthetic --seed 3 --no-eval --minibatches 6";
  ASSERT_EQ(run_pipedream("train " + model + " --batch 16 --threads 1 --save " + dir + "/train.safetensors", dir + "/train.log"), 0)
      << read_text(dir + "/train.log");
  // Two stages, layer 0 and layers 1-2; a batch of 16 in four microbatches of 4, as train takes it.
  std::ofstream(dir + "/plan.json") << R"({"format": "pipedream-plan/1", "config": "1-1", "schedule": "1f1b-flush",
    "profile": {"path": "p.json", "model": "small", "batch_size": 4},
    "stages": [{"index": 0, "layers": [0, 0], "replicas": 1, "ranks": [0]},
               {"index": 1, "layers": [1, 2], "replicas": 1, "ranks": [1]}]})";
  ASSERT_EQ(run_pipedream("run --plan " + dir + "/plan.json " + model + " --schedule 1f1b-flush --microbatches 4 --batch 16 --save " +
                    dir + "/flush.safetensors",
                dir + "/flush.log"),
            0)
      << read_text(dir + "/flush.log");
  const NamedTensors a = load_safetensors(dir + "/train.safetensors"), b = load_safetensors(dir + "/flush.safetensors");
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    ASSERT_EQ(a[k].first, b[k].first);
    for (int64_t i = 0; i < a[k].second.numel(); ++i)
      ASSERT_NEAR(a[k].second.f32()[i], b[k].second.f32()[i], 1e-6) << a[k].first << "[" << i << "]";
  }
}

}  // namespace
}  // namespace pd::onnx
