// Imported ONNX models on the GPU, end to end through the `pipedream`
// binary: a GPT-2-style decoder (scripts/torch_models/transformer_lm.py,
// GPT2: Gather, MatMul, Transpose, Split/Slice, Where, Softmax, LayerNorm)
// and torchvision's resnet50 (Conv, BatchNorm in training mode, pools,
// Gemm), each exported by scripts/export_torch.py, trained for one step
// from the same seed and batch on the CPU and on the GPU. The saved
// weights agree within 1e-4 of each tensor's max-abs, and the step's
// update (weights after lr 1 minus weights after lr 0) within 1e-3 of the
// update's max-abs, so a wrong gradient on the GPU fails even where
// lr * gradient is below the weights' tolerance.
// Skipped without a GPU, or without a python3 with torch and torchvision
// (PD_TORCH_PYTHON, else /opt/pdkit/python3, /usr/bin/python3, python3).
#include <gtest/gtest.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <ostream>
#include <string>

#include "core/safetensors.h"

#if defined(PIPEDREAM_HAVE_CUDA)
#include "core/cuda/backend.h"
#endif

namespace pd {
namespace {

int visible_gpus() {
#if defined(PIPEDREAM_HAVE_CUDA)
  return cuda::visible_device_count();
#else
  return 0;
#endif
}

int shell(const std::string& cmd) {
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The first python3 that imports torch and torchvision; empty when none does.
std::string torch_python() {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv("PD_TORCH_PYTHON"); env && *env) candidates.emplace_back(env);
  candidates.emplace_back("/opt/pdkit/python3");
  candidates.emplace_back("/usr/bin/python3");  // Debian's python3-torch
  candidates.emplace_back("python3");
  for (const std::string& py : candidates)
    if (shell("OMP_NUM_THREADS=1 " + py + " -c 'import torch, torchvision' >/dev/null 2>&1") == 0) return py;
  return "";
}

std::string scratch() {
  const auto d = std::filesystem::path(PD_BINARY_DIR) / "gpu_onnx_device_test";
  std::filesystem::create_directories(d);
  return d.string();
}

struct ImportedModel {
  std::string name;
  std::string export_args;  // scripts/export_torch.py arguments before -o
};
void PrintTo(const ImportedModel& m, std::ostream* os) { *os << m.name; }

// The tensors of a safetensors file by name, as host floats.
std::map<std::string, std::vector<float>> load(const std::string& path) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& [name, t] : load_safetensors(path)) out[name] = t.to_floats();
  return out;
}

float max_abs(const std::vector<float>& v) {
  float m = 0;
  for (float x : v) m = std::max(m, std::fabs(x));
  return m;
}

// Per tensor: max |got - want| <= rel * max-abs(want) (+ a floor for all-zero tensors).
::testing::AssertionResult within(const std::map<std::string, std::vector<float>>& got,
                                  const std::map<std::string, std::vector<float>>& want, double rel, const char* what) {
  if (got.size() != want.size())
    return ::testing::AssertionFailure() << what << ": " << got.size() << " tensors, expected " << want.size();
  int bad = 0;
  auto fail = ::testing::AssertionFailure();
  for (const auto& [name, w] : want) {
    auto it = got.find(name);
    if (it == got.end() || it->second.size() != w.size()) {
      fail << what << ": tensor " << name << " missing or of another size\n";
      ++bad;
      continue;
    }
    double err = 0;
    for (size_t i = 0; i < w.size(); ++i) err = std::max(err, std::fabs(double(it->second[i]) - double(w[i])));
    const double bound = rel * std::max<double>(max_abs(w), 1e-12);
    if (!(err <= bound)) {
      if (bad < 8) fail << what << ": " << name << " differs by " << err << " (bound " << bound << ")\n";
      ++bad;
    }
  }
  if (bad) return fail << bad << " of " << want.size() << " tensors outside " << rel << " of their max-abs";
  return ::testing::AssertionSuccess();
}

// a - b per tensor, parameters only.
std::map<std::string, std::vector<float>> minus(const std::map<std::string, std::vector<float>>& a,
                                                const std::map<std::string, std::vector<float>>& b) {
  std::map<std::string, std::vector<float>> d;
  for (const auto& [name, v] : a) {
    // BatchNorm's running statistics move with the forward, not the learning rate.
    if (name.find("running_") != std::string::npos || name.find("num_batches_tracked") != std::string::npos) continue;
    auto it = b.find(name);
    if (it == b.end() || it->second.size() != v.size()) continue;
    std::vector<float>& r = d[name];
    r.resize(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = v[i] - it->second[i];
  }
  return d;
}

class OnnxOnGpu : public ::testing::TestWithParam<ImportedModel> {};

TEST_P(OnnxOnGpu, OneTrainingStepOnTheGpuMatchesTheCpu) {
  if (visible_gpus() == 0) GTEST_SKIP() << "no GPU visible (cudaGetDeviceCount reports none)";
  const std::string py = torch_python();
  if (py.empty())
    GTEST_SKIP() << "no python3 with torch and torchvision (set PD_TORCH_PYTHON, or install python3-torch "
                    "python3-torchvision)";
  const ImportedModel& m = GetParam();
  const std::string dir = scratch(), onnx = dir + "/" + m.name + ".onnx", log = dir + "/" + m.name;
  ASSERT_EQ(shell("OMP_NUM_THREADS=4 " + py + " " + PD_SOURCE_DIR + "/scripts/export_torch.py " + m.export_args +
                  " -o " + onnx + " --batch 4 --dropout 0 >" + log + ".export.log 2>&1"),
            0)
      << read_text(log + ".export.log");
  // One SGD step (momentum's first step is the gradient) from the exported
  // weights, on the same synthetic batch.
  auto train = [&](const std::string& device, const std::string& lr) {
    const std::string out = dir + "/" + m.name + "-" + device + "-lr" + lr + ".safetensors";
    const std::string cmd = std::string(PD_BINARY_DIR) + "/bin/pipedream train --model " + onnx +
                            " --data synthetic --batch 4 --minibatches 1 --seed 3 --no-eval --lr " + lr +
                            " --device " + device + " --deterministic --save " + out + " >" + out + ".log 2>&1";
    EXPECT_EQ(shell(cmd), 0) << cmd << "\n" << read_text(out + ".log");
    return load(out);
  };
  const auto cpu0 = train("cpu", "0"), cpu1 = train("cpu", "1"), gpu1 = train("cuda", "1");
  ASSERT_FALSE(cpu1.empty());
  EXPECT_TRUE(within(gpu1, cpu1, 1e-4, "weights"));
  const auto cpu_update = minus(cpu1, cpu0);
  ASSERT_FALSE(cpu_update.empty());
  EXPECT_TRUE(within(minus(gpu1, cpu0), cpu_update, 1e-3, "update"));
}

INSTANTIATE_TEST_SUITE_P(
    Imported, OnnxOnGpu,
    ::testing::Values(ImportedModel{"gpt2", std::string(PD_SOURCE_DIR) +
                                                "/scripts/torch_models/transformer_lm.py:GPT2 --tokens 32"},
                      ImportedModel{"resnet50", "resnet50 --input 3,64,64 --classes 10"}),
    [](const ::testing::TestParamInfo<ImportedModel>& i) { return i.param.name; });

}  // namespace
}  // namespace pd
