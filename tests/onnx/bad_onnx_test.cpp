// Malformed or unsupported ONNX files: an
// unsupported op, a dynamic dimension, a truncated file and a missing
// initializer are each a UserError naming the node and its op - exit
// status 2 from the pipedream binary - and nothing crashes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>

#include "core/error.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_test_util.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::onnx {
namespace {

using testing::encode;
using testing::small_model;

std::string import_error(const std::string& bytes) {
  try {
    import_model(parse_model(bytes, "bad.onnx"), "bad");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

std::string write(const std::string& name, const std::string& bytes) {
  const std::string path = pd::testing::scratch_dir("bad") + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Exit status and output of `pipedream models --model path`.
int pipedream_models(const std::string& path, std::string& out) {
  const std::string log = path + ".log";
  const int status = pd::testing::run_pipedream("models --model " + path, log);
  out = pd::testing::read_text(log);
  return status;
}

TEST(BadOnnx, TheSmallModelImports) {
  const Model m = import_model(parse_model(encode(small_model()), "small.onnx"), "small");
  EXPECT_EQ(m.classes, 5);
  EXPECT_EQ(m.input_shape, (Shape{2, 6, 6}));
  // The residual Add joins two paths: conv..add is one segment; cuts after it.
  ASSERT_EQ(m.size(), 3);
  EXPECT_EQ(m.layer(0).describe(), "onnx(Conv,Relu,Add)");
}

TEST(BadOnnx, UnsupportedOpNamesTheNodeAndTheOp) {
  ModelProto m = small_model();
  m.graph.nodes[1].op_type = "Celu";
  const std::string e = import_error(encode(m));
  EXPECT_NE(e.find("node 'relu' (Celu)"), std::string::npos) << e;
  EXPECT_NE(e.find("op Celu is not supported"), std::string::npos) << e;
}

TEST(BadOnnx, UnsupportedAttributeNamesTheNodeAndTheOp) {
  ModelProto m = small_model();
  m.graph.nodes[0].attributes.push_back(testing::int_attribute("group", 2));
  const std::string e = import_error(encode(m));
  EXPECT_NE(e.find("node 'conv' (Conv)"), std::string::npos) << e;
}

TEST(BadOnnx, DynamicDimensionNamesTheInputAndTheNodeReadingIt) {
  ModelProto m = small_model();
  m.graph.inputs[0].dims[0] = -1;
  m.graph.inputs[0].dim_names[0] = "batch_size";
  const std::string e = import_error(encode(m));
  EXPECT_NE(e.find("dynamic dimension 0 ('batch_size')"), std::string::npos) << e;
  EXPECT_NE(e.find("node 'conv' (Conv)"), std::string::npos) << e;
}

TEST(BadOnnx, MissingInitializerNamesTheNodeAndTheOp) {
  ModelProto m = small_model();
  m.graph.initializers.erase(m.graph.initializers.begin() + 2);  // fc.weight
  const std::string e = import_error(encode(m));
  EXPECT_NE(e.find("node 'fc' (Gemm)"), std::string::npos) << e;
  EXPECT_NE(e.find("'fc.weight'"), std::string::npos) << e;
  EXPECT_NE(e.find("missing initializer"), std::string::npos) << e;
}

TEST(BadOnnx, EveryTruncationIsAUserError) {
  const std::string bytes = encode(small_model());
  for (size_t n = 0; n < bytes.size(); ++n) {
    const std::string e = import_error(bytes.substr(0, n));
    EXPECT_FALSE(e.empty()) << "a file cut at " << n << " of " << bytes.size() << " bytes imported";
  }
  // Inside a node, the message names the node and op read so far.
  const std::string cut = bytes.substr(0, bytes.find("kernel_shape") + 3);
  const std::string e = import_error(cut);
  EXPECT_NE(e.find("truncated"), std::string::npos) << e;
  EXPECT_NE(e.find("in graph node 0 node 'conv' (Conv)"), std::string::npos) << e;
}

TEST(BadOnnx, WrongOpsetIsAUserError) {
  ModelProto m = small_model();
  m.opsets[""] = 9;
  EXPECT_NE(import_error(encode(m)).find("opset 9 is not supported"), std::string::npos);
}

TEST(BadOnnx, ThePipedreamBinaryExitsWith2AndTheMessage) {
  ModelProto unsupported = small_model();
  unsupported.graph.nodes[1].op_type = "Celu";
  ModelProto dynamic = small_model();
  dynamic.graph.inputs[0].dims[0] = -1;
  ModelProto missing = small_model();
  missing.graph.initializers.erase(missing.graph.initializers.begin());
  const std::string full = encode(small_model());
  const std::vector<std::pair<std::string, std::string>> cases = {
      {write("unsupported.onnx", encode(unsupported)), "node 'relu' (Celu)"},
      {write("dynamic.onnx", encode(dynamic)), "node 'conv' (Conv)"},
      {write("missing.onnx", encode(missing)), "node 'conv' (Conv)"},
      {write("truncated.onnx", full.substr(0, full.size() / 2)), "truncated"},
  };
  for (const auto& [path, needle] : cases) {
    std::string out;
    EXPECT_EQ(pipedream_models(path, out), 2) << path << ": " << out;
    EXPECT_NE(out.find(needle), std::string::npos) << path << ": " << out;
  }
  std::string out;
  EXPECT_EQ(pipedream_models(write("good.onnx", full), out), 0) << out;
}

}  // namespace
}  // namespace pd::onnx
