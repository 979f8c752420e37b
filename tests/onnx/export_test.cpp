// `pipedream export`: trained weights written back into
// the ONNX file. The exported file imports to exactly the saved weights
// (parameters and BatchNorm running statistics), leaves the rest of the
// file as it was, and refuses weights that do not fit, naming the tensor.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sys/wait.h>

#include "core/error.h"
#include "models/parameters.h"
#include "onnx/export.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_test_util.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::onnx {
namespace {

using testing::encode;
using testing::float_attribute;
using testing::small_model;

// small_model with a training-mode BatchNormalization after the conv, so
// that running statistics (buffers) are exported too.
ModelProto bn_model() {
  ModelProto m = small_model();
  Graph& g = m.graph;
  TensorValue var = testing::float_tensor("bn.var", {2});
  var.floats = {1.0f, 0.5f};
  g.initializers.insert(g.initializers.end(), {testing::float_tensor("bn.scale", {2}, 1.0f),
                                               testing::float_tensor("bn.bias", {2}),
                                               testing::float_tensor("bn.mean", {2}), var});
  Node bn;
  bn.name = "bn";
  bn.op_type = "BatchNormalization";
  bn.inputs = {"c", "bn.scale", "bn.bias", "bn.mean", "bn.var"};
  bn.outputs = {"b", "bn.mean_out", "bn.var_out"};
  Attribute training;
  training.name = "training_mode";
  training.type = 2;
  training.i = 1;
  bn.attributes = {float_attribute("epsilon", 1e-5f), float_attribute("momentum", 0.9f), training};
  g.nodes[1].inputs = {"b"};  // relu reads the normalized conv output
  g.nodes.insert(g.nodes.begin() + 1, bn);
  return m;
}

std::string scratch_file(const std::string& name, const std::string& bytes = "") {
  const std::string path = pd::testing::scratch_dir("export") + "/" + name;
  if (!bytes.empty()) std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

// Exit status and output of `pipedream ARGS`.
int pipedream(const std::string& args, std::string& out) {
  const std::string log = scratch_file("pipedream.log");
  const int status = pd::testing::run_pipedream(args, log);
  out = pd::testing::read_text(log);
  return status;
}

// What the model imported from `path` starts training with.
NamedTensors initial_weights(const std::string& path) {
  return ParameterStore::create(import_model_file(path), 0).named_tensors();
}

std::map<std::string, Tensor> by_name(const NamedTensors& ts) { return {ts.begin(), ts.end()}; }

bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.f32(), b.f32(), a.nbytes()) == 0;
}

void expect_bitwise_equal(const NamedTensors& got, const NamedTensors& want) {
  const auto g = by_name(got), w = by_name(want);
  ASSERT_EQ(g.size(), w.size());
  for (const auto& [name, t] : w) {
    ASSERT_TRUE(g.count(name)) << name;
    EXPECT_TRUE(bitwise_equal(g.at(name), t)) << name;
  }
}

// The stored name of initializer `onnx_name` ("2.fc.weight" for "fc.weight").
std::string stored(const NamedTensors& ts, const std::string& onnx_name) {
  for (const auto& [name, t] : ts)
    if (name.size() > onnx_name.size() && name.substr(name.find('.') + 1) == onnx_name) return name;
  ADD_FAILURE() << "no stored tensor for initializer " << onnx_name;
  return "";
}

std::string export_error(const std::string& onnx_bytes, const NamedTensors& weights) {
  try {
    export_weights(onnx_bytes, "bn.onnx", weights, "w.safetensors");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(OnnxExport, TrainedWeightsImportBitwise) {
  const std::string in = scratch_file("bn.onnx", encode(bn_model()));
  const std::string saved = scratch_file("trained.safetensors"), out = scratch_file("trained.onnx");
  std::string log;
  ASSERT_EQ(pipedream(cat("train --model ", in, " --data synthetic --minibatches 2 --batch 4 --no-eval --threads 1 "
                          "--save ", saved), log), 0) << log;
  ASSERT_EQ(pipedream(cat("export --onnx ", in, " --weights ", saved, " -o ", out), log), 0) << log;
  const NamedTensors trained = load_safetensors(saved);
  expect_bitwise_equal(initial_weights(out), trained);
  // Training changed the weights and the running statistics (--save
  // writes them), so the equality above is not the initial weights twice.
  // (conv.bias stays: BatchNorm right after the conv cancels its gradient.)
  const auto initial = by_name(initial_weights(in)), after = by_name(trained);
  for (const char* name : {"conv.weight", "fc.weight", "bn.scale", "bn.mean", "bn.var"}) {
    const std::string s = stored(trained, name);
    EXPECT_FALSE(bitwise_equal(initial.at(s), after.at(s))) << s;
  }
}

// --external-data: the weights go to OUTPUT.data beside the output (here
// in another folder than the input), each tensor named by location
// relative to the model's folder, offset and length; the export imports to
// exactly the trained weights, as the embedded export does.
TEST(OnnxExport, ExternalDataOnRequestImportsBitwise) {
  namespace fs = std::filesystem;
  const std::string in = scratch_file("bn_ext.onnx", encode(bn_model()));
  const std::string saved = scratch_file("trained_ext.safetensors"), embedded = scratch_file("embedded.onnx");
  const fs::path folder = fs::path(scratch_file("external"));
  fs::remove_all(folder);
  fs::create_directories(folder);
  const std::string out = (folder / "trained.onnx").string();
  std::string log;
  ASSERT_EQ(pipedream(cat("train --model ", in, " --data synthetic --minibatches 2 --batch 4 --no-eval --threads 1 "
                          "--save ", saved), log), 0) << log;
  ASSERT_EQ(pipedream(cat("export --onnx ", in, " --weights ", saved, " -o ", embedded), log), 0) << log;
  EXPECT_EQ(log.find("external data"), std::string::npos) << log;  // small: embedded unless asked
  ASSERT_EQ(pipedream(cat("export --onnx ", in, " --weights ", saved, " -o ", out, " --external-data"), log), 0) << log;
  EXPECT_NE(log.find("trained.onnx.data"), std::string::npos) << log;
  const NamedTensors trained = load_safetensors(saved);
  size_t weight_bytes = 0;
  for (const auto& [n, t] : trained) weight_bytes += t.nbytes();
  ASSERT_TRUE(fs::exists(folder / "trained.onnx.data"));
  EXPECT_GE(fs::file_size(folder / "trained.onnx.data"), weight_bytes);
  // No weight left inside: the .onnx lost their bytes and gained each one's three entries.
  EXPECT_LE(fs::file_size(out) + weight_bytes, fs::file_size(embedded) + 80 * trained.size());
  expect_bitwise_equal(initial_weights(out), trained);
  expect_bitwise_equal(initial_weights(out), initial_weights(embedded));
  // Re-exported from its own external data (read from its folder), embedded again: the same weights.
  const std::string again = scratch_file("again.onnx");
  ASSERT_EQ(pipedream(cat("export --onnx ", out, " --weights ", saved, " -o ", again), log), 0) << log;
  expect_bitwise_equal(initial_weights(again), trained);
}

TEST(OnnxExport, InitialWeightsGiveTheSameFile) {
  // The test encoder writes raw_data last, as export does, so exporting
  // the weights the file holds reproduces it byte for byte.
  const std::string bytes = encode(bn_model());
  const std::string in = scratch_file("same.onnx", bytes);
  EXPECT_EQ(export_weights(bytes, in, initial_weights(in), "initial"), bytes);
}

TEST(OnnxExport, CheckpointStageFilesTogether) {
  // A checkpoint holds one file per stage, each with its optimizer slots
  // under the same names ("optimizer.slot.0"); export takes them together
  // and skips the slots. (Stage files split as `run --checkpoint-dir` does.)
  const std::string bytes = encode(bn_model());
  const std::string in = scratch_file("stages.onnx", bytes);
  NamedTensors w = initial_weights(in);
  for (auto& [name, t] : w) t = Tensor::full(t.shape(), 0.75f);
  NamedTensors first, rest;
  for (const auto& [name, t] : w) (name.rfind("0.", 0) == 0 ? first : rest).emplace_back(name, t);
  ASSERT_FALSE(first.empty());
  ASSERT_FALSE(rest.empty());
  const std::vector<std::string> stages = {scratch_file("stage-0.safetensors"), scratch_file("stage-1.safetensors")};
  first.emplace_back("optimizer.slot.0", Tensor::zeros({2}));
  rest.emplace_back("optimizer.slot.0", Tensor::zeros({5}));
  save_safetensors(stages[0], first);
  save_safetensors(stages[1], rest);
  const std::string out = scratch_file("stages_out.onnx");
  export_model_file(in, stages, out);
  expect_bitwise_equal(initial_weights(out), w);
}

TEST(OnnxExport, OtherInitializersAndNodesAreKept) {
  ModelProto m = bn_model();
  m.graph.initializers.push_back(testing::float_tensor("unused", {3}));  // read by no node: not a parameter
  const std::string bytes = encode(m);
  const std::string in = scratch_file("kept.onnx", bytes);
  NamedTensors w = initial_weights(in);
  for (auto& [name, t] : w) t = Tensor::full(t.shape(), 0.25f);
  const ModelProto out = parse_model(export_weights(bytes, in, w, "quarter"), "out.onnx");
  ASSERT_EQ(out.graph.initializers.size(), m.graph.initializers.size());
  for (size_t i = 0; i < out.graph.initializers.size(); ++i) {
    const TensorValue &got = out.graph.initializers[i], &was = m.graph.initializers[i];
    EXPECT_EQ(got.name, was.name);
    EXPECT_EQ(got.dims, was.dims);
    const std::vector<float> quarter(static_cast<size_t>(was.numel()), 0.25f);
    EXPECT_EQ(got.floats, was.name == "unused" ? was.floats : quarter) << was.name;
  }
  ModelProto rest_out = out, rest_in = m;  // everything but the initializers
  rest_out.graph.initializers.clear();
  rest_in.graph.initializers.clear();
  EXPECT_EQ(encode(rest_out), encode(rest_in));
}

TEST(OnnxExport, WeightsThatDoNotFitNameTheTensor) {
  const std::string bytes = encode(bn_model());
  const std::string in = scratch_file("bad.onnx", bytes);
  const NamedTensors good = initial_weights(in);
  const auto without = [&](const std::string& name) {
    NamedTensors w;
    for (const auto& [n, t] : good)
      if (n != name) w.emplace_back(n, t);
    return w;
  };
  const std::string fc = stored(good, "fc.weight"), bias = stored(good, "conv.bias"), var = stored(good, "bn.var");
  const std::string missing = export_error(bytes, without(fc));
  EXPECT_NE(missing.find("has no tensor '" + fc + "' (initializer 'fc.weight'"), std::string::npos) << missing;
  NamedTensors reshaped = without(bias);
  reshaped.emplace_back(bias, Tensor::zeros({3}));
  const std::string shape = export_error(bytes, reshaped);
  EXPECT_NE(shape.find("'" + bias + "' is [3]"), std::string::npos) << shape;
  NamedTensors retyped = without(var);
  retyped.emplace_back(var, Tensor::from_ints({1, 2}, {2}));
  const std::string dtype = export_error(bytes, retyped);
  EXPECT_NE(dtype.find("'" + var + "' is [2] i32"), std::string::npos) << dtype;
  NamedTensors extra = good;
  extra.emplace_back("7.head.weight", Tensor::zeros({1}));
  const std::string unknown = export_error(bytes, extra);
  EXPECT_NE(unknown.find("'7.head.weight' is not a parameter"), std::string::npos) << unknown;
}

TEST(OnnxExport, CommandExitsTwoNamingTheTensor) {
  const std::string in = scratch_file("cli.onnx", encode(bn_model()));
  const NamedTensors all = initial_weights(in);
  const std::string mean = stored(all, "bn.mean");
  NamedTensors w;
  for (const auto& [n, t] : all)
    if (n != mean) w.emplace_back(n, t);
  const std::string weights = scratch_file("missing.safetensors"), out = scratch_file("never.onnx");
  save_safetensors(weights, w);
  std::filesystem::remove(out);
  std::string log;
  EXPECT_EQ(pipedream(cat("export --onnx ", in, " --weights ", weights, " -o ", out), log), 2) << log;
  EXPECT_NE(log.find("'" + mean + "'"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(out)) << "nothing written on error";
}

// Any ONNX loader reads the exported file: the `onnx` package checks it and
// its initializers equal the safetensors values.
TEST(OnnxExport, OnnxPackageLoadsTheExport) {
  // From / so that the repository's own onnx/ folder is not taken for the package.
  const std::string probe =
      "cd / && " + std::string(pd::testing::kPython) + " -c 'import onnx.numpy_helper' >/dev/null 2>&1";
  if (std::system(probe.c_str()) != 0)
    GTEST_SKIP() << "the python `onnx` package is not installed (python3 -c 'import onnx' fails)";
  const std::string in = scratch_file("py.onnx", encode(bn_model()));
  NamedTensors w = initial_weights(in);
  for (auto& [name, t] : w) t = Tensor::full(t.shape(), 0.5f);
  const std::string weights = scratch_file("py.safetensors"), out = scratch_file("py_out.onnx");
  save_safetensors(weights, w);
  std::string log;
  ASSERT_EQ(pipedream(cat("export --onnx ", in, " --weights ", weights, " -o ", out), log), 0) << log;
  EXPECT_TRUE(pd::testing::run_python(cat("tests/onnx/check_export.py ", out, " ", weights), scratch_file("py.log")))
      << pd::testing::read_text(scratch_file("py.log"));
}

}  // namespace
}  // namespace pd::onnx
