// ONNX files that are well-formed protobuf but hostile: a Conv padded by
// 2^40 (used to exit 1, "out of host memory"), two nodes writing one tensor
// (used to trip an internal check), and every integer attribute and
// dimension of a small model set to a huge count. Each is imported or
// refused with a UserError naming the node and the attribute or tensor.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <typeinfo>
#include <algorithm>
#include <sys/wait.h>

#include "core/error.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_test_util.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::onnx {
namespace {

using testing::encode;
using testing::small_model;

std::string import_error(const ModelProto& m) {
  try {
    import_model(parse_model(encode(m), "hostile.onnx"), "hostile");
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a UserError: ") + e.what();
  }
  return "accepted";
}

Attribute* attribute(Node& n, const std::string& name) {
  for (Attribute& a : n.attributes)
    if (a.name == name) return &a;
  return nullptr;
}

TEST(HostileOnnx, ConvPadsOf2To40NameTheNodeAndTheAttribute) {
  const int64_t huge = int64_t{1} << 40;
  for (const std::vector<int64_t>& pads : {std::vector<int64_t>{huge, huge, huge, huge}, {0, 0, huge, 0}}) {
    ModelProto m = small_model();
    attribute(m.graph.nodes[0], "pads")->ints = pads;
    const std::string e = import_error(m);
    EXPECT_NE(e.find("node 'conv' (Conv): attribute 'pads' holds 1099511627776"), std::string::npos) << e;
  }
}

TEST(HostileOnnx, TwoWritersOfOneTensorNameTheTensorAndBothNodes) {
  ModelProto m = small_model();
  m.graph.nodes[2].outputs = {"r"};  // the Add writes relu's output
  const std::string e = import_error(m);
  EXPECT_NE(e.find("tensor 'r' is written by both node 'relu' (Relu) and node 'residual' (Add)"), std::string::npos)
      << e;
  ModelProto over_initializer = small_model();
  over_initializer.graph.nodes[1].outputs = {"conv.bias"};
  const std::string e2 = import_error(over_initializer);
  EXPECT_NE(e2.find("tensor 'conv.bias' is written by both initializer 'conv.bias' and node 'relu' (Relu)"),
            std::string::npos)
      << e2;
}

// Every integer of the model's structure (attributes, initializer and input
// dimensions) set in turn to each huge count: imported or a UserError, in
// well under the fuzz suite's 5 s per input, never another exception.
TEST(HostileOnnx, HugeCountsEverywhereAreImportedOrRefused) {
  const std::vector<int64_t> counts = {65537,          16777217,        1000000000,          2147483647,
                                       4294967295,     int64_t{1} << 40, INT64_MAX,           -2147483648LL,
                                       INT64_MIN + 1};
  const ModelProto seed = small_model();
  int refused = 0, cases = 0;
  std::string failures;
  auto check = [&](const ModelProto& m, const std::string& what) {
    ++cases;
    const auto start = std::chrono::steady_clock::now();
    const std::string e = import_error(m);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (e.rfind("not a UserError", 0) == 0 || s > 5.0) failures += "\n  " + what + ": " + e.substr(0, 200);
    if (e != "accepted") ++refused;
  };
  for (int64_t v : counts) {
    for (size_t n = 0; n < seed.graph.nodes.size(); ++n)
      for (size_t a = 0; a < seed.graph.nodes[n].attributes.size(); ++a) {
        const Attribute& attr = seed.graph.nodes[n].attributes[a];
        for (size_t k = 0; k < std::max<size_t>(attr.ints.size(), 1); ++k) {
          ModelProto m = seed;
          Attribute& target = m.graph.nodes[n].attributes[a];
          if (target.ints.empty()) target.i = v;
          else target.ints[k] = v;
          check(m, cat("node ", n, " attribute ", attr.name, "[", k, "] = ", v));
        }
      }
    for (size_t t = 0; t < seed.graph.initializers.size(); ++t)
      for (size_t d = 0; d < seed.graph.initializers[t].dims.size(); ++d) {
        ModelProto m = seed;
        m.graph.initializers[t].dims[d] = v;
        check(m, cat("initializer ", t, " dims[", d, "] = ", v));
      }
    for (size_t d = 0; d < seed.graph.inputs[0].dims.size(); ++d) {
      ModelProto m = seed;
      m.graph.inputs[0].dims[d] = v;
      check(m, cat("input dims[", d, "] = ", v));
    }
  }
  std::printf("hostile onnx: %d cases, %d refused\n", cases, refused);
  EXPECT_GT(refused, 0);
  EXPECT_TRUE(failures.empty()) << failures;
}

TEST(HostileOnnx, ThePipedreamBinaryExitsWith2) {
  ModelProto padded = small_model();
  attribute(padded.graph.nodes[0], "pads")->ints = {int64_t{1} << 40, int64_t{1} << 40, int64_t{1} << 40,
                                                   int64_t{1} << 40};
  ModelProto two_writers = small_model();
  two_writers.graph.nodes[2].outputs = {"r"};
  const std::string dir = pd::testing::scratch_dir("hostile");
  const std::vector<std::pair<ModelProto, std::string>> cases = {{padded, "attribute 'pads'"},
                                                                 {two_writers, "tensor 'r' is written by both"}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const std::string path = cat(dir, "/m", i, ".onnx"), log = path + ".log";
    std::ofstream(path, std::ios::binary) << encode(cases[i].first);
    EXPECT_EQ(pd::testing::run_pipedream("models --model " + path, log), 2) << pd::testing::read_text(log);
    EXPECT_NE(pd::testing::read_text(log).find(cases[i].second), std::string::npos) << pd::testing::read_text(log);
  }
}

}  // namespace
}  // namespace pd::onnx
