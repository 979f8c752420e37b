// What scripts/export_torch.py and the importer do with PyTorch models
// beyond the numerics (tests/onnx/torch_ops_test.cpp checks those): a model
// file importing its sibling module exports from any working directory; an
// op PyTorch cannot export is named with its line of source (exit 2); a
// reshape that splits the batch and a BatchNorm that gets the batch in
// dimension 1 exit 2 naming the node and why; a transformer encoder whose
// attention moves the batch trains at another batch than the export's and
// pipelines (4 stages cut between its units) equal to --reference.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "tests/onnx/onnx_test_util.h"

namespace pd::onnx {
namespace {

using pd::testing::read_text;

// Runs scripts/export_torch.py from the build tree (not the source folder); its exit status.
int export_torch(const std::string& args, const std::string& log) {
  const std::string cmd = "cd " + std::string(PD_BINARY_DIR) + " && OMP_NUM_THREADS=1 " + pd::testing::kPython + " " +
                          PD_SOURCE_DIR + "/scripts/export_torch.py " + args + " >" + log + " 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

const std::string kOps = std::string(PD_SOURCE_DIR) + "/tests/onnx/transformer_ops.py:";

TEST(ExportTorch, LoadsAModelThatImportsItsSiblingModule) {
  PD_SKIP_WITHOUT_TORCH();
  const std::string d = pd::testing::scratch_dir("export_sibling");
  ASSERT_EQ(export_torch(cat(PD_SOURCE_DIR, "/tests/onnx/sibling_model/model.py:Model -o ", d, "/m.onnx --input 8"),
                         d + "/export.log"),
            0)
      << read_text(d + "/export.log");
  ASSERT_EQ(pd::testing::run_pipedream("models --model " + d + "/m.onnx", d + "/models.log"), 0) << read_text(d + "/models.log");
  EXPECT_NE(read_text(d + "/models.log").find("block/fc"), std::string::npos) << read_text(d + "/models.log");
}

TEST(ExportTorch, NamesTheOpPyTorchCannotExport) {
  PD_SKIP_WITHOUT_TORCH();
  const std::string d = pd::testing::scratch_dir("export_unexportable");
  ASSERT_EQ(export_torch(kOps + "Unexportable -o " + d + "/m.onnx --input 6,16", d + "/export.log"), 2)
      << read_text(d + "/export.log");
  const std::string log = read_text(d + "/export.log");
  EXPECT_NE(log.find("cannot export aten::i0"), std::string::npos) << log;
  EXPECT_NE(log.find("transformer_ops.py("), std::string::npos) << "no line of source: " << log;
  EXPECT_EQ(log.find("Traceback"), std::string::npos) << log;
}

// A model whose constructor takes no num_classes, given --classes: exit 2
// naming the constructor's arguments, not a Python traceback.
TEST(ExportTorch, NamesTheArgumentsAConstructorDoesNotTake) {
  PD_SKIP_WITHOUT_TORCH();
  const std::string d = pd::testing::scratch_dir("export_kwargs");
  ASSERT_EQ(export_torch(cat(PD_SOURCE_DIR, "/tests/onnx/sibling_model/model.py:Model -o ", d,
                             "/m.onnx --input 8 --classes 10"),
                         d + "/export.log"),
            2)
      << read_text(d + "/export.log");
  const std::string log = read_text(d + "/export.log");
  EXPECT_NE(log.find("takes no argument num_classes (from --classes)"), std::string::npos) << log;
  EXPECT_EQ(log.find("Traceback"), std::string::npos) << log;
}

// Exports `cls` and returns `pipedream models`' exit status, its output in `log`.
int import_status(const std::string& cls, const std::string& input, std::string& log) {
  const std::string d = pd::testing::scratch_dir("refused_" + cls);
  EXPECT_EQ(export_torch(kOps + cls + " -o " + d + "/m.onnx --input " + input, d + "/export.log"), 0)
      << read_text(d + "/export.log");
  const int rc = pd::testing::run_pipedream("models --model " + d + "/m.onnx", d + "/models.log");
  log = read_text(d + "/models.log");
  return rc;
}

TEST(BatchTracking, RefusesAReshapeThatSplitsTheBatch) {
  PD_SKIP_WITHOUT_TORCH();
  std::string log;
  EXPECT_EQ(import_status("SplitsBatch", "6,16", log), 2) << log;
  EXPECT_NE(log.find("node '/Reshape' (Reshape)"), std::string::npos) << log;
  EXPECT_NE(log.find("splits the batch dimension (4) of [4, 6, 16]"), std::string::npos) << log;
}

TEST(BatchTracking, RefusesBatchNormWithTheBatchMoved) {
  PD_SKIP_WITHOUT_TORCH();
  std::string log;
  EXPECT_EQ(import_status("BatchNormAfterTranspose", "6,16", log), 2) << log;
  EXPECT_NE(log.find("(BatchNormalization): expects the batch first"), std::string::npos) << log;
  EXPECT_NE(log.find("dimension 1"), std::string::npos) << log;
}

TEST(BatchTracking, EncoderTrainsAtAnotherBatchAndPipelinesLikeTheReference) {
  PD_SKIP_WITHOUT_TORCH();
  const std::string d = pd::testing::scratch_dir("encoder_pipeline");
  const std::string onnx = d + "/enc.onnx";
  // Exported at batch 4, sequence-first attention inside (the batch moves
  // to dimension 1 and merges with the heads).
  ASSERT_EQ(export_torch(kOps + "EncoderLayer -o " + onnx +
                             " --input 6,16 --kwargs '{\"layers\": 3, \"causal\": true, \"batch_first\": true}'",
                         d + "/export.log"),
            0)
      << read_text(d + "/export.log");
  auto ok = [&](const std::string& args, const std::string& log) {
    ASSERT_EQ(pd::testing::run_pipedream(args, d + "/" + log), 0) << args << "\n" << read_text(d + "/" + log);
  };
  const std::string common = "--model " + onnx + " --data synthetic --seed 5 --no-eval ";
  ok("profile --model " + onnx + " --batch 8 --threads 1 --warmup 0 --iters 1 --min-time 0 -o " + d + "/profile.json",
     "profile.log");
  ok("plan --profile " + d + "/profile.json --workers 4 --bandwidth 1 --straight -o " + d + "/plan.json", "plan.log");
  const nlohmann::json plan = nlohmann::json::parse(read_text(d + "/plan.json"));
  ASSERT_GE(plan.at("stages").size(), 2u) << plan.dump();
  ok("run --plan " + d + "/plan.json " + common + "--batch 8 --minibatches 4 --save " + d + "/mpi.safetensors", "mpi.log");
  ok("run --plan " + d + "/plan.json --reference " + common + "--batch 8 --minibatches 4 --save " + d + "/ref.safetensors",
     "ref.log");
  EXPECT_EQ(read_text(d + "/mpi.safetensors"), read_text(d + "/ref.safetensors"));
  EXPECT_FALSE(read_text(d + "/mpi.safetensors").empty());
}

}  // namespace
}  // namespace pd::onnx
