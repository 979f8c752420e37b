// Weights kept outside the graph: ONNX external data (what PyTorch and
// onnx.save_model(..., save_as_external_data=True) write for models over
// 2 GB) read by byte range relative to the model's folder, equal to the
// embedded import bit for bit; every unsafe or broken location refused,
// naming the tensor (exit 2 from the binary); and large initializers left
// in the file until a layer is built, so a process building one stage of an
// 8-stage model holds far less than the whole model.
#include <gtest/gtest.h>

#include <malloc.h>
#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

#include "core/cpu/host_allocator.h"
#include "core/error.h"
#include "models/parameters.h"
#include "onnx/import.h"
#include "tests/onnx/onnx_test_util.h"
#include "tests/onnx/onnx_writer.h"

namespace pd::onnx {
namespace {

namespace fs = std::filesystem;
using testing::encode;
using testing::float_tensor;
using testing::int_attribute;
using testing::make_node;
using testing::Writer;

// x [4, width] -> (Gemm -> Relu) x layers -> logits [4, width].
ModelProto mlp(int layers, int64_t width) {
  ModelProto m;
  m.ir_version = 8;
  m.producer = "pipedream-test";
  m.opsets[""] = 17;
  Graph& g = m.graph;
  g.name = "mlp";
  ValueInfo in;
  in.name = "x";
  in.elem_type = kFloat;
  in.dims = {4, width};
  in.dim_names = {"", ""};
  in.has_shape = true;
  g.inputs.push_back(in);
  ValueInfo out;
  out.name = "logits";
  out.elem_type = kFloat;
  g.outputs.push_back(out);
  std::string x = "x";
  for (int l = 0; l < layers; ++l) {
    const std::string w = cat("layers.", l, ".weight"), b = cat("layers.", l, ".bias");
    g.initializers.push_back(float_tensor(w, {width, width}, 0.1f + 0.01f * float(l)));
    g.initializers.push_back(float_tensor(b, {width}));
    Node gemm = make_node(cat("fc", l), "Gemm", {x, w, b}, {l + 1 == layers ? "logits" : cat("h", l)});
    gemm.attributes = {int_attribute("transB", 1)};
    g.nodes.push_back(gemm);
    if (l + 1 == layers) break;
    g.nodes.push_back(make_node(cat("relu", l), "Relu", {cat("h", l)}, {cat("r", l)}));
    x = cat("r", l);
  }
  return m;
}

// A TensorProto whose data is in an external file (data_location EXTERNAL).
std::string external_tensor(const TensorValue& t, const std::map<std::string, std::string>& entries) {
  Writer w;
  for (int64_t d : t.dims) w.integer(1, d);
  w.integer(2, t.data_type);
  w.str(8, t.name);
  for (const auto& [key, value] : entries) {
    Writer e;
    e.str(1, key);
    e.str(2, value);
    w.str(13, e.bytes);
  }
  w.integer(14, 1);
  return w.bytes;
}

// The model with every float initializer of at least `min_elements` moved
// to `data` (appended, 64-byte aligned as onnx does not need but PyTorch
// does), its entries made by `entries(name, offset, length)`.
using EntriesFor = std::function<std::map<std::string, std::string>(const std::string&, uint64_t, uint64_t)>;
std::string encode_external(const ModelProto& m, std::string& data, const EntriesFor& entries, int64_t min_elements = 0) {
  return encode(m, [&](const TensorValue& t) {
    if (t.data_type != kFloat || t.numel() < min_elements) return encode(t);
    data.resize((data.size() + 63) / 64 * 64, '\0');
    const uint64_t offset = data.size(), length = t.floats.size() * 4;
    data.append(reinterpret_cast<const char*>(t.floats.data()), length);
    return external_tensor(t, entries(t.name, offset, length));
  });
}

std::map<std::string, std::string> at(const std::string& location, uint64_t offset, uint64_t length) {
  return {{"location", location}, {"offset", std::to_string(offset)}, {"length", std::to_string(length)}};
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A fresh folder per case.
std::string folder(const std::string& name) {
  const std::string d = pd::testing::scratch_dir("external/" + name);
  for (const auto& e : fs::directory_iterator(d)) fs::remove_all(e.path());
  return d;
}

// Every tensor of the whole model as the importer initialises it.
NamedTensors initial(const Model& m) { return ParameterStore::create(m, 0).named_tensors(); }

void expect_same_bits(const NamedTensors& a, const NamedTensors& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].first, b[k].first);
    ASSERT_EQ(a[k].second.shape(), b[k].second.shape()) << a[k].first;
    EXPECT_EQ(std::memcmp(a[k].second.raw(), b[k].second.raw(), a[k].second.nbytes()), 0) << a[k].first;
  }
}

TEST(OnnxExternalData, ImportEqualsTheEmbeddedImportBitForBit) {
  const ModelProto proto = mlp(3, 96);  // 96x96 weights: 9216 elements, left in the file
  const std::string dir = folder("equal");
  write_file(dir + "/embedded.onnx", encode(proto));
  std::string data;
  write_file(dir + "/external.onnx",
             encode_external(proto, data, [](const std::string&, uint64_t o, uint64_t n) { return at("external.onnx.data", o, n); }));
  write_file(dir + "/external.onnx.data", data);
  const NamedTensors in_memory = initial(import_model(proto, "mlp"));
  expect_same_bits(initial(import_model_file(dir + "/embedded.onnx")), in_memory);
  expect_same_bits(initial(import_model_file(dir + "/external.onnx")), in_memory);
  // Left in the files, not decoded at parse time.
  const ModelProto parsed = read_model_file(dir + "/external.onnx");
  ASSERT_TRUE(parsed.graph.initializers[0].stored.has_value());
  EXPECT_TRUE(parsed.graph.initializers[0].floats.empty());
  EXPECT_TRUE(read_model_file(dir + "/embedded.onnx").graph.initializers[0].stored.has_value());
}

// A subfolder location, and length left out (the rest of the file).
TEST(OnnxExternalData, ReadsASubfolderAndAMissingLengthAsTheRestOfTheFile) {
  const ModelProto proto = mlp(2, 80);
  const std::string dir = folder("subfolder");
  fs::create_directories(dir + "/weights");
  int file = 0;
  std::string data;  // unused: one file per tensor below
  const std::string onnx = encode_external(proto, data, [&](const std::string& name, uint64_t o, uint64_t n) {
    const std::string location = cat("weights/t", file++, ".bin");
    write_file(dir + "/" + location, data.substr(o, n));
    return std::map<std::string, std::string>{{"location", location}};
  });
  write_file(dir + "/model.onnx", onnx);
  expect_same_bits(initial(import_model_file(dir + "/model.onnx")), initial(import_model(proto, "mlp")));
}

// The message a model whose first weight has these entries is refused with
// (empty if it imports).
std::string refusal(const std::string& dir, const std::map<std::string, std::string>& entries) {
  const ModelProto proto = mlp(2, 80);
  std::string data;
  bool first = true;
  const std::string onnx = encode_external(proto, data, [&](const std::string&, uint64_t o, uint64_t n) {
    if (first) {
      first = false;
      return entries;
    }
    return at("w.bin", o, n);
  }, 4096);
  write_file(dir + "/model.onnx", onnx);
  write_file(dir + "/w.bin", data);
  try {
    import_model_file(dir + "/model.onnx");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(OnnxExternalData, RefusesUnsafeOrBrokenLocationsNamingTheTensor) {
  const std::string dir = folder("refusals");
  const uint64_t bytes = 80 * 80 * 4;
  // Sanity: the same model with a good location imports.
  EXPECT_EQ(refusal(dir, at("w.bin", 0, bytes)), "");

  const std::string outside = pd::testing::scratch_dir("external/outside");
  write_file(outside + "/w.bin", std::string(bytes * 3, '\0'));

  std::string why = refusal(dir, at(outside + "/w.bin", 0, bytes));
  EXPECT_NE(why.find("tensor 'layers.0.weight'"), std::string::npos) << why;
  EXPECT_NE(why.find("is absolute"), std::string::npos) << why;

  why = refusal(dir, at("../outside/w.bin", 0, bytes));
  EXPECT_NE(why.find("tensor 'layers.0.weight'"), std::string::npos) << why;
  EXPECT_NE(why.find("leaves the model's folder"), std::string::npos) << why;

  fs::create_symlink(outside + "/w.bin", dir + "/link.bin");
  why = refusal(dir, at("link.bin", 0, bytes));
  EXPECT_NE(why.find("tensor 'layers.0.weight'"), std::string::npos) << why;
  EXPECT_NE(why.find("leads out of the model's folder"), std::string::npos) << why;

  fs::create_directories(dir + "/sub/inner");
  fs::create_symlink("../..", dir + "/sub/inner/up");  // a symlink that stays inside is fine
  EXPECT_EQ(refusal(dir, at("sub/inner/up/w.bin", 0, bytes)), "");

  why = refusal(dir, at("w.bin", 1 << 20, bytes));
  EXPECT_NE(why.find("tensor 'layers.0.weight'"), std::string::npos) << why;
  EXPECT_NE(why.find("lies outside"), std::string::npos) << why;

  why = refusal(dir, at("w.bin", 64, bytes * 2));
  EXPECT_NE(why.find("lies outside"), std::string::npos) << why;

  why = refusal(dir, at("w.bin", 0, bytes - 4));
  EXPECT_NE(why.find("tensor 'layers.0.weight'"), std::string::npos) << why;
  EXPECT_NE(why.find("take " + std::to_string(bytes)), std::string::npos) << why;

  fs::create_directories(dir + "/folder.bin");
  why = refusal(dir, at("folder.bin", 0, bytes));
  EXPECT_NE(why.find("tensor 'layers.0.weight'"), std::string::npos) << why;
  EXPECT_NE(why.find("is not a regular file"), std::string::npos) << why;

  ASSERT_EQ(::mkfifo((dir + "/fifo.bin").c_str(), 0600), 0);
  why = refusal(dir, at("fifo.bin", 0, bytes));
  EXPECT_NE(why.find("is not a regular file"), std::string::npos) << why;

  why = refusal(dir, at("missing.bin", 0, bytes));
  EXPECT_NE(why.find("cannot open its external data file"), std::string::npos) << why;

  why = refusal(dir, {{"offset", "0"}});
  EXPECT_NE(why.find("names no location"), std::string::npos) << why;

  why = refusal(dir, {{"location", "w.bin"}, {"offset", "-8"}});
  EXPECT_NE(why.find("is not a byte count"), std::string::npos) << why;
}

TEST(OnnxExternalData, TheBinaryExitsTwoNamingTheTensor) {
  const std::string dir = folder("binary");
  ASSERT_EQ(refusal(dir, at("../w.bin", 0, 80 * 80 * 4)).empty(), false);
  const std::string log = dir + "/models.log";
  EXPECT_EQ(pd::testing::run_pipedream("models --model " + dir + "/model.onnx", log), 2);
  const std::string out = pd::testing::read_text(log);
  EXPECT_NE(out.find("tensor 'layers.0.weight'"), std::string::npos) << out;
}

// Resident memory (kB) from /proc/self/status: "VmRSS" or the peak "VmHWM".
long status_kb(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field + ":", 0) == 0) return std::stol(line.substr(field.size() + 1));
  return -1;
}

// An 8-stage pipeline of 8 Gemm layers of 4 MiB each (32 MiB in all): a
// process importing the model and building stage 0's layers peaks at a
// fraction of the model, for embedded weights as for external data.
TEST(OnnxExternalData, AStageOfAnEightStageModelPeaksWellBelowTheWholeModel) {
  const int kLayers = 8;
  const int64_t kWidth = 1024;
  const long model_kb = long(kLayers) * kWidth * kWidth * 4 / 1024;
  const std::string dir = folder("peak");
  {
    const ModelProto proto = mlp(kLayers, kWidth);
    write_file(dir + "/embedded.onnx", encode(proto));
    std::string data;
    write_file(dir + "/external.onnx",
               encode_external(proto, data, [](const std::string&, uint64_t o, uint64_t n) { return at("w.data", o, n); }));
    write_file(dir + "/w.data", data);
  }
  // Once before measuring: the process's one-time start-up (OpenBLAS's
  // buffers at the trace's first GEMM) is not the import's.
  (void)ParameterStore::create(import_model_file(dir + "/embedded.onnx"), 0, 1, 0);
  for (const char* file : {"embedded.onnx", "external.onnx"}) {
    cpu::release_host_cache();  // blocks cached by earlier tests would hide this one's
    ::malloc_trim(0);
    {
      std::ofstream clear("/proc/self/clear_refs");
      clear << "5";  // resets VmHWM to the current resident size
      if (!clear.flush()) GTEST_SKIP() << "cannot reset the peak resident size (/proc/self/clear_refs)";
    }
    const long before = status_kb("VmRSS");
    ASSERT_GT(before, 0);
    Model m = import_model_file(dir + "/" + file);
    // 15 layers (Gemm, Relu, ...): stage 0 of 8 is layers 0-1, one Gemm.
    ASSERT_EQ(m.size(), 2 * kLayers - 1);
    ParameterStore stage = ParameterStore::create(m, 0, 1, 0);
    EXPECT_EQ(stage.param_bytes(), size_t(kWidth * kWidth + kWidth) * 4);
    const long peak = status_kb("VmHWM") - before;
    std::printf("%s: importing and building stage 0 of 8 peaked %ld kB above the %ld kB before; the model is %ld kB\n",
                file, peak, before, model_kb);
    // One stage's weights (4 MiB) and the trace's zero weight (4 MiB), not 32 MiB.
    EXPECT_LT(peak, model_kb / 3) << file;
  }
}

}  // namespace
}  // namespace pd::onnx
