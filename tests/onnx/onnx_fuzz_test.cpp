// The ONNX reader and importer on mutated valid files, with the fuzz
// machinery of tests/fuzz (mutator.h): every input is imported or refused
// with a UserError; no other exception, crash or hang.
#include <gtest/gtest.h>

#include "onnx/import.h"
#include "tests/fuzz/mutator.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::onnx {
namespace {

TEST(FuzzOnnx, MutatedModelsAreImportedOrRefusedWithAUserError) {
  ModelProto no_residual = testing::small_model();
  no_residual.graph.nodes[2].inputs = {"r", "r"};
  const std::vector<std::string> seeds = {testing::encode(testing::small_model()), testing::encode(no_residual)};
  fuzz::FuzzResult r = fuzz::run_fuzz("model.onnx", seeds, 2000, 15, [](const std::string& bytes) {
    import_model(parse_model(bytes, "fuzz.onnx"), "fuzz");
  });
  std::printf("fuzz model.onnx: 2000 cases, %d accepted, %d refused, %zu failures\n", r.accepted, r.refused,
              r.failures.size());
  EXPECT_GT(r.refused, 0);
  std::string list;
  for (const auto& f : r.failures) list += "\n  " + f;
  EXPECT_TRUE(r.failures.empty()) << list;
}

}  // namespace
}  // namespace pd::onnx
