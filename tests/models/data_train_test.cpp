// `pipedream train` on data a user has (images:, npy:, tokens:): each trains
// a zoo model, a broken file exits 2 naming it, and the loader threads only
// compute ahead: the same bits are trained with 0 and with 2 of them.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/safetensors.h"
#include "tests/models/data_files.h"

namespace pd {
namespace {

using namespace pd::testing;

struct Result {
  int exit_code = -1;
  std::string output;
};

Result pipedream(const std::string& args) {
  const std::string cmd = std::string(PD_BINARY_DIR) + "/bin/pipedream " + args + " 2>&1";
  Result r;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.output.append(buf, n);
  const int status = ::pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

fs::path scratch() {
  static const fs::path d = [] {
    fs::path p = fs::temp_directory_path() / ("pd_data_train_" + std::to_string(::getpid()));
    fs::remove_all(p);
    fs::create_directories(p);
    return p;
  }();
  return d;
}

// 4 classes of 60 images (240 files, JPEG and PNG) for vgg-mini's 3x32x32.
const fs::path& image_folder() {
  static const fs::path d = [] {
    const fs::path p = scratch() / "images";
    write_image_folder(p, 4, 60);
    return p;
  }();
  return d;
}

const std::string kImages = "--model vgg-mini --model-options classes=4,width=0.25 --batch 8 --threads 1 --seed 3";

TEST(DataTrain, ImageFolderTrainsAndLoaderThreadsTrainTheSameBits) {
  const fs::path a = scratch() / "a.safetensors", b = scratch() / "b.safetensors";
  const fs::path metrics = scratch() / "m.jsonl";
  const std::string common = "train " + kImages + " --data images:" + image_folder().string() +
                             " --minibatches 6 --microbatches 2 --log-every 1 ";
  Result r0 = pipedream(common + "--loader-threads 0 --save " + a.string() + " --metrics " + metrics.string());
  ASSERT_EQ(r0.exit_code, 0) << r0.output;
  EXPECT_NE(r0.output.find("data wait"), std::string::npos) << r0.output;
  Result r2 = pipedream(common + "--loader-threads 2 --save " + b.string());
  ASSERT_EQ(r2.exit_code, 0) << r2.output;
  const NamedTensors wa = load_safetensors(a.string()), wb = load_safetensors(b.string());
  ASSERT_EQ(wa.size(), wb.size());
  for (size_t i = 0; i < wa.size(); ++i) {
    const auto& [name, t] = wa[i];
    ASSERT_EQ(name, wb[i].first);
    const Tensor& u = wb[i].second;
    ASSERT_EQ(t.nbytes(), u.nbytes()) << name;
    EXPECT_EQ(0, std::memcmp(t.raw(), u.raw(), t.nbytes())) << name << " differs with loader threads";
  }
  std::ifstream in(metrics);
  std::string line;
  int steps = 0;
  while (std::getline(in, line))
    if (line.find("\"event\":\"step\"") != std::string::npos) {
      ++steps;
      EXPECT_NE(line.find("\"data_wait_ms\":"), std::string::npos) << line;
    }
  EXPECT_EQ(steps, 6);
}

bool same_weights(const fs::path& a, const fs::path& b) {
  const NamedTensors wa = load_safetensors(a.string()), wb = load_safetensors(b.string());
  if (wa.size() != wb.size()) return false;
  for (size_t i = 0; i < wa.size(); ++i)
    if (wa[i].first != wb[i].first || wa[i].second.nbytes() != wb[i].second.nbytes() ||
        std::memcmp(wa[i].second.raw(), wb[i].second.raw(), wa[i].second.nbytes()) != 0)
      return false;
  return true;
}

// `run`: the first stage's loader threads fetch the forwards' inputs of
// its look-ahead window; the same bits are trained.
TEST(DataTrain, PipelineFirstStageLoaderThreadsTrainTheSameBits) {
  for (const std::string schedule : {"1f1b-rr", "1f1b-flush --microbatches 2"}) {
    std::vector<fs::path> saved;
    for (const char* threads : {"0", "2"}) {
      saved.push_back(scratch() / (std::string("run_") + threads + ".safetensors"));
      Result r = pipedream("run --plan auto --workers 1 --plan-out " + (scratch() / "plan.json").string() + " " +
                           kImages.substr(0, kImages.find(" --threads")) + " --threads-per-worker 1 --seed 3" +
                           " --data images:" + image_folder().string() + " --minibatches 4 --no-eval --schedule " +
                           schedule + " --loader-threads " + threads + " --save " + saved.back().string());
      ASSERT_EQ(r.exit_code, 0) << r.output;
    }
    EXPECT_TRUE(same_weights(saved[0], saved[1])) << schedule;
  }
}

TEST(DataTrain, TruncatedJpegExitsTwoNamingTheFile) {
  const fs::path d = scratch() / "broken";
  write_image_folder(d, 4, 4);
  const fs::path jpg = d / "class2" / "img002.jpg";
  std::string bytes;
  {
    std::ifstream in(jpg, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  write_file(jpg, bytes.substr(0, bytes.size() / 3));
  for (const char* threads : {"0", "2"}) {
    Result r = pipedream("train " + kImages + " --data images:" + d.string() + " --data-options val=0.25 --epochs 1 "
                         "--loader-threads " + threads);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_NE(r.output.find("img002.jpg is not a readable JPEG"), std::string::npos) << r.output;
  }
  Result empty = pipedream("train " + kImages + " --data images:" + (scratch() / "nothing").string());
  EXPECT_EQ(empty.exit_code, 2) << empty.output;
  Result bad_threads = pipedream("train " + kImages + " --data synthetic --loader-threads -1");
  EXPECT_EQ(bad_threads.exit_code, 2) << bad_threads.output;
}

TEST(DataTrain, NpyAndTokensTrainZooModels) {
  const fs::path d = scratch() / "arrays";
  fs::create_directories(d);
  std::vector<float> x(200 * 784);
  std::vector<uint8_t> y(200);
  for (size_t i = 0; i < y.size(); ++i) {
    y[i] = static_cast<uint8_t>(i % 7);
    for (size_t k = 0; k < 784; ++k) x[i * 784 + k] = (k % 10 == y[i]) ? 1.0f : 0.0f;
  }
  write_file(d / "x.npy", npy_bytes("<f4", {200, 1, 28, 28}, raw_bytes(x)));
  write_file(d / "y.npy", npy_bytes("|u1", {200}, raw_bytes(y)));
  Result npy = pipedream("train --model mlp --data npy:" + (d / "x.npy").string() + "," + (d / "y.npy").string() +
                         " --epochs 3 --batch 20 --threads 1 --lr 0.05");
  ASSERT_EQ(npy.exit_code, 0) << npy.output;
  EXPECT_NE(npy.output.find("test accuracy 100.00%"), std::string::npos) << npy.output;

  std::vector<uint16_t> tokens(4000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7) % 64);
  write_file(d / "corpus.bin", raw_bytes(tokens));
  Result tok = pipedream("train --model gpt-mini --model-options vocab=64,context=16,width=32,depth=1,heads=2 "
                         "--data tokens:" + (d / "corpus.bin").string() +
                         " --minibatches 20 --batch 8 --threads 1 --optimizer adam --lr 0.01");
  ASSERT_EQ(tok.exit_code, 0) << tok.output;
  EXPECT_NE(tok.output.find("test loss"), std::string::npos) << tok.output;
}

}  // namespace
}  // namespace pd
