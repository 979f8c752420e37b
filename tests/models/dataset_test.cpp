// Datasets and the sample order: a pure function of (seed, epoch); batch 64
// sees the samples of four microbatches of 16; missing files are UserErrors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <unistd.h>
#include <fstream>
#include <numeric>

#include "core/error.h"
#include "models/dataset.h"

namespace pd {
namespace {

namespace fs = std::filesystem;

const char* kFashionDir = "/usr/share/datasets/fashion-mnist";

// One scratch folder per test process, removed when the process exits.
struct ScratchDir {
  fs::path path;
  explicit ScratchDir(const std::string& prefix)
      : path(fs::temp_directory_path() / (prefix + std::to_string(::getpid()))) {}
  ~ScratchDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

fs::path temp_dir(const std::string& name) {
  static ScratchDir scratch("pd_dataset_test_");
  fs::path d = scratch.path / name;
  fs::create_directories(d);
  return d;
}

TEST(SampleOrder, PermutationIsPureFunctionOfSeedAndEpoch) {
  SampleOrder a(1000, 7), b(1000, 7), other_seed(1000, 8);
  std::vector<int64_t> p0 = a.permutation(0);
  std::vector<int64_t> sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  std::vector<int64_t> iota(1000);
  std::iota(iota.begin(), iota.end(), 0);
  EXPECT_EQ(sorted, iota);
  EXPECT_NE(p0, iota);
  // Asking for epoch 3 first, or from another object, changes nothing.
  (void)b.permutation(3);
  EXPECT_EQ(b.permutation(0), p0);
  EXPECT_EQ(a.positions(0, 10, 5), std::vector<int64_t>(p0.begin() + 10, p0.begin() + 15));
  EXPECT_NE(a.permutation(1), p0);
  EXPECT_NE(other_seed.permutation(0), p0);
}

TEST(SampleOrder, BatchOf64SeesFourMicrobatchesOf16) {
  SampleOrder order(60000, 3);
  EXPECT_EQ(order.minibatches_per_epoch(64), 937);
  for (int64_t epoch : {0, 1}) {
    for (int64_t m : {0, 5, 936}) {
      std::vector<int64_t> big = order.minibatch(epoch, m, 64), micro;
      for (int64_t k = 0; k < 4; ++k) {
        auto part = order.minibatch(epoch, 4 * m + k, 16);
        micro.insert(micro.end(), part.begin(), part.end());
      }
      EXPECT_EQ(big, micro) << "epoch " << epoch << " minibatch " << m;
    }
  }
}

TEST(Datasets, SyntheticFitsTheModelAndFetchesAreConsistent) {
  Model m = build_model(zoo_spec("cnn"));
  DataSplits d = open_dataset("synthetic", "", m);
  EXPECT_EQ(d.train->sample_shape(), (Shape{1, 28, 28}));
  std::vector<int64_t> idx = {5, 17, 3};
  Tensor x = d.train->inputs(idx), y = d.train->labels(idx);
  EXPECT_EQ(x.shape(), (Shape{3, 1, 28, 28}));
  EXPECT_EQ(y.shape(), (Shape{3}));
  EXPECT_EQ(y.data<int32_t>()[0], 5);
  // Fetching one sample alone gives the same bytes as inside a batch.
  std::vector<int64_t> one = {17};
  Tensor x1 = d.train->inputs(one);
  EXPECT_EQ(0, std::memcmp(x1.raw(), x.f32() + 784, 784 * 4));

  Model gpt = build_model(zoo_spec("gpt-mini", {{"depth", 1}, {"context", 16}}));
  DataSplits t = open_dataset("synthetic", "", gpt);
  Tensor tok = t.train->inputs(idx), next = t.train->labels(idx);
  EXPECT_EQ(tok.shape(), (Shape{3, 16}));
  EXPECT_EQ(next.data<int32_t>()[0], tok.data<int32_t>()[1]);  // next-token targets
}

TEST(Datasets, TextGivesNextByteTargets) {
  fs::path f = temp_dir("text") / "corpus.txt";
  std::string text;
  for (int i = 0; i < 200; ++i) text += "hello world " + std::to_string(i) + "\n";
  { std::ofstream(f) << text; }
  Model gpt = build_model(zoo_spec("gpt-mini", {{"depth", 1}, {"context", 32}}));
  DataSplits d = open_dataset("text", f.string(), gpt);
  EXPECT_EQ(d.train->size(), static_cast<int64_t>((text.size() * 9 / 10 - 1) / 32));
  std::vector<int64_t> idx = {1};
  Tensor x = d.train->inputs(idx), y = d.train->labels(idx);
  EXPECT_EQ(x.data<int32_t>()[0], static_cast<unsigned char>(text[32]));
  EXPECT_EQ(y.data<int32_t>()[0], static_cast<unsigned char>(text[33]));
  EXPECT_EQ(y.data<int32_t>()[30], x.data<int32_t>()[31]);
  // A classifier cannot train on text; a missing file is a UserError.
  EXPECT_THROW(open_dataset("text", f.string(), build_model(zoo_spec("cnn"))), UserError);
  EXPECT_THROW(open_dataset("text", "/nonexistent/corpus.txt", gpt), UserError);
}

TEST(Datasets, CifarBinaryBatches) {
  fs::path dir = temp_dir("cifar");
  auto write_batch = [&](const std::string& name, int records) {
    std::ofstream f(dir / name, std::ios::binary);
    for (int r = 0; r < records; ++r) {
      f.put(static_cast<char>(r % 10));
      for (int k = 0; k < 3072; ++k) f.put(static_cast<char>((r + k) % 256));
    }
  };
  Model vgg = build_model(zoo_spec("vgg-mini"));
  EXPECT_THROW(open_dataset("cifar10", dir.string(), vgg), UserError);  // empty folder
  for (int i = 1; i <= 5; ++i) write_batch("data_batch_" + std::to_string(i) + ".bin", 4);
  write_batch("test_batch.bin", 3);
  DataSplits d = open_dataset("cifar10", dir.string(), vgg);
  EXPECT_EQ(d.train->size(), 20);
  EXPECT_EQ(d.test->size(), 3);
  std::vector<int64_t> idx = {7};
  EXPECT_EQ(d.train->labels(idx).data<int32_t>()[0], 3);
  EXPECT_NEAR(d.train->inputs(idx).f32()[0], (3 / 255.0f - 0.4914f) / 0.2470f, 1e-5);
  // CIFAR images do not fit a 28x28 model.
  EXPECT_THROW(open_dataset("cifar10", dir.string(), build_model(zoo_spec("cnn"))), UserError);
  { std::ofstream(dir / "test_batch.bin", std::ios::binary) << "truncated"; }
  EXPECT_THROW(open_dataset("cifar10", dir.string(), vgg), UserError);
}

TEST(Datasets, MissingFilesAreUserErrors) {
  Model m = build_model(zoo_spec("cnn"));
  EXPECT_THROW(open_dataset("fashion-mnist", "/nonexistent/dir", m), UserError);
  EXPECT_THROW(open_dataset("cifar10", "", build_model(zoo_spec("vgg-mini"))), UserError);
  EXPECT_THROW(open_dataset("imagenet", "", m), UserError);
  fs::path dir = temp_dir("badgz");
  for (const char* n : {"train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"})
    std::ofstream(dir / n) << "not gzip at all";
  EXPECT_THROW(open_dataset("fashion-mnist", dir.string(), m), UserError);
}

TEST(Datasets, FashionMnistIsNormalised) {
  if (!fs::exists(fs::path(kFashionDir) / "train-images-idx3-ubyte.gz")) GTEST_SKIP() << "dataset-fashion-mnist not installed";
  DataSplits d = open_dataset("fashion-mnist", "", build_model(zoo_spec("mlp")));
  ASSERT_EQ(d.train->size(), 60000);
  ASSERT_EQ(d.test->size(), 10000);
  std::vector<int64_t> idx(2000);
  std::iota(idx.begin(), idx.end(), 0);
  std::vector<float> x = d.train->inputs(idx).to_floats();
  double mean = 0, sq = 0;
  for (float v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (float v : x) sq += (v - mean) * (v - mean);
  EXPECT_NEAR(mean, 0.0, 0.05);
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(x.size())), 1.0, 0.05);
  std::vector<float> y = d.train->labels(idx).to_floats();
  EXPECT_EQ(*std::max_element(y.begin(), y.end()), 9.0f);
}

}  // namespace
}  // namespace pd
