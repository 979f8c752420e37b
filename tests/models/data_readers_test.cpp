// The readers of data a user has (images:DIR, npy:, tokens:), each on
// files written here: what they yield, the splits they define, and the
// bad inputs each refuses with a UserError naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <thread>

#include "core/error.h"
#include "models/dataset.h"
#include "models/loader.h"
#include "tests/models/data_files.h"

namespace pd {
namespace {

using namespace pd::testing;

// A fresh folder per test (and process), removed afterwards.
struct Scratch {
  fs::path path;
  explicit Scratch(const std::string& name)
      : path(fs::temp_directory_path() / ("pd_data_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string thrown(const std::function<void()>& f) {
  try {
    f();
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), 0);
  return v;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

Model cnn(int classes) { return build_model(zoo_spec("cnn", {{"classes", classes}})); }
Model vgg_mini(int classes) { return build_model(zoo_spec("vgg-mini", {{"classes", classes}})); }

TEST(ImageFolder, ClassesAreFoldersAndEveryTenthImageIsHeldOut) {
  Scratch d("images");
  write_image_folder(d.path, 3, 20);
  const Model m = vgg_mini(3);  // 3x32x32
  DataSplits s = open_dataset("images:" + d.path.string(), "", m);
  EXPECT_EQ(s.train->size(), 54);
  EXPECT_EQ(s.test->size(), 6);
  EXPECT_EQ(s.train->sample_shape(), (Shape{3, 32, 32}));
  Tensor y = s.test->labels(iota(6));
  EXPECT_EQ(std::vector<int32_t>(y.data<int32_t>(), y.data<int32_t>() + 6), (std::vector<int32_t>{0, 0, 1, 1, 2, 2}));
  Tensor x = s.train->inputs(iota(4));
  EXPECT_EQ(x.shape(), (Shape{4, 3, 32, 32}));
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_TRUE(std::isfinite(x.f32()[i]));
  // Normalised with ImageNet's statistics: pixel values in [0, 1] map inside these bounds.
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_GE(x.f32()[i], -0.486f / 0.224f - 1e-3f);
}

TEST(ImageFolder, TrainingCropsArePureFunctionsOfSeedEpochAndSample) {
  Scratch d("crops");
  write_image_folder(d.path, 2, 10);
  DataSplits s = open_dataset("images:" + d.path.string(), "", vgg_mini(2));
  const std::vector<int64_t> idx = {3, 0, 7};
  EXPECT_TRUE(same_bits(s.train->training_inputs(idx, 1, 2), s.train->training_inputs(idx, 1, 2)));
  EXPECT_FALSE(same_bits(s.train->training_inputs(idx, 1, 2), s.train->training_inputs(idx, 1, 3)));
  EXPECT_FALSE(same_bits(s.train->training_inputs(idx, 1, 2), s.train->inputs(idx)));  // centre crop
  // One sample alone gets the bits it gets inside a batch.
  Tensor batch = s.train->training_inputs(idx, 1, 2), alone = s.train->training_inputs({&idx[1], 1}, 1, 2);
  EXPECT_EQ(0, std::memcmp(batch.f32() + 3 * 32 * 32, alone.f32(), 3 * 32 * 32 * sizeof(float)));
  DataSplits off = open_dataset("images:" + d.path.string(), "", vgg_mini(2), parse_data_options("augment=0"));
  EXPECT_TRUE(same_bits(off.train->training_inputs(idx, 1, 2), off.train->inputs(idx)));
}

TEST(ImageFolder, TrainAndValFoldersAreTheSplitsAndGrayModelsGetOneChannel) {
  Scratch d("trainval");
  write_image_folder(d.path / "train", 2, 6);
  write_image_folder(d.path / "val", 2, 2);
  DataSplits s = open_dataset("images:" + d.path.string(), "", cnn(2), parse_data_options("mean=0.5,std=0.5"));
  EXPECT_EQ(s.train->size(), 12);
  EXPECT_EQ(s.test->size(), 4);
  Tensor x = s.test->inputs(iota(1));
  EXPECT_EQ(x.shape(), (Shape{1, 1, 28, 28}));
  for (int64_t i = 0; i < x.numel(); ++i) ASSERT_TRUE(x.f32()[i] >= -1.0f && x.f32()[i] <= 1.0f);
}

TEST(ImageFolder, BadInputsNameTheFileAndWhatIsWrong) {
  Scratch d("bad_images");
  const Model m = vgg_mini(2);
  const std::string src = "images:" + d.path.string();
  EXPECT_NE(thrown([&] { open_dataset(src, "", m); }).find("no class subfolders"), std::string::npos);
  fs::create_directories(d.path / "class0");
  fs::create_directories(d.path / "class1");
  EXPECT_NE(thrown([&] { open_dataset(src, "", m); }).find("holds no images"), std::string::npos);
  write_image_folder(d.path, 2, 10);
  write_file(d.path / "class0" / "notes.txt", "hello");
  EXPECT_NE(thrown([&] { open_dataset(src, "", m); }).find("notes.txt is not a .jpg"), std::string::npos);
  fs::remove(d.path / "class0" / "notes.txt");
  write_file(d.path / "class0" / "fake.png", "GIF89a......");
  EXPECT_NE(thrown([&] { open_dataset(src, "", m); }).find("fake.png is neither a JPEG nor a PNG"), std::string::npos);
  fs::remove(d.path / "class0" / "fake.png");
  EXPECT_NE(thrown([&] { open_dataset(src, "", vgg_mini(3)); }).find("2 classes"), std::string::npos);
  EXPECT_NE(thrown([&] { open_dataset(src, "", m, parse_data_options("val=0.9")); }).find("val must be in"),
            std::string::npos);
  EXPECT_NE(thrown([&] { open_dataset(src, "", m, parse_data_options("mean=1/2")); }).find("3 channels"),
            std::string::npos);
  EXPECT_NE(thrown([&] { parse_data_options("size=3"); }).find("unknown key 'size'"), std::string::npos);

  // A truncated JPEG passes the signature check at open and fails when decoded.
  const fs::path jpg = d.path / "class0" / "img000.jpg";
  std::string bytes;
  {
    std::ifstream in(jpg, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  write_file(jpg, bytes.substr(0, bytes.size() / 2));
  DataSplits s = open_dataset(src, "", m);
  const std::string why = thrown([&] { s.train->inputs(iota(2)); });
  EXPECT_NE(why.find("img000.jpg is not a readable JPEG"), std::string::npos) << why;
  const fs::path png = d.path / "class1" / "img001.png";
  {
    std::ifstream in(png, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  write_file(png, bytes.substr(0, bytes.size() - 20));
  const std::vector<int64_t> second_class = {10};  // class1/img001.png: after class0's 9 and class1's img000
  const std::string png_why = thrown([&] { s.train->inputs(second_class); });
  EXPECT_NE(png_why.find("img001.png is not a readable PNG"), std::string::npos) << png_why;
}

// mlp takes [1, 28, 28] floats.
std::string mlp_samples(int n) {
  std::vector<float> x(static_cast<size_t>(n) * 784);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 97) / 97.0f;
  return npy_bytes("<f4", {n, 1, 28, 28}, raw_bytes(x));
}
std::string mlp_labels(int n) {
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) y[static_cast<size_t>(i)] = i % 10;
  return npy_bytes("<i8", {n}, raw_bytes(y));
}

TEST(Npy, SamplesAndLabelsWithEveryTenthRowHeldOut) {
  Scratch d("npy");
  write_file(d.path / "x.npy", mlp_samples(40));
  write_file(d.path / "y.npy", mlp_labels(40));
  const Model m = build_model(zoo_spec("mlp"));
  DataSplits s = open_dataset("npy:" + (d.path / "x.npy").string() + "," + (d.path / "y.npy").string(), "", m);
  EXPECT_EQ(s.train->size(), 36);
  EXPECT_EQ(s.test->size(), 4);
  Tensor y = s.test->labels(iota(4));  // rows 9, 19, 29, 39
  EXPECT_EQ(std::vector<int32_t>(y.data<int32_t>(), y.data<int32_t>() + 4), (std::vector<int32_t>{9, 9, 9, 9}));
  Tensor x = s.train->inputs(iota(1));
  EXPECT_FLOAT_EQ(x.f32()[1], 1.0f / 97.0f);
}

TEST(Npy, NpzStoredAndDeflatedWithTrainAndTestArrays) {
  Scratch d("npz");
  const Model m = build_model(zoo_spec("mlp"));
  for (bool deflate : {false, true}) {
    const fs::path f = d.path / (deflate ? "c.npz" : "s.npz");
    write_file(f, zip_bytes({{"x_train.npy", mlp_samples(30)}, {"y_train.npy", mlp_labels(30)},
                             {"x_test.npy", mlp_samples(10)}, {"y_test.npy", mlp_labels(10)}},
                            deflate));
    DataSplits s = open_dataset("npy:" + f.string(), "", m);
    EXPECT_EQ(s.train->size(), 30);
    EXPECT_EQ(s.test->size(), 10);
    EXPECT_EQ(s.test->labels(iota(10)).data<int32_t>()[7], 7);
  }
  write_file(d.path / "xy.npz", zip_bytes({{"x.npy", mlp_samples(20)}, {"y.npy", mlp_labels(20)}}, true));
  EXPECT_EQ(open_dataset("npy:" + (d.path / "xy.npz").string(), "", m).train->size(), 18);
}

TEST(Npy, BadInputsNameTheFileAndWhatIsWrong) {
  Scratch d("bad_npy");
  const Model m = build_model(zoo_spec("mlp"));
  const std::string x = (d.path / "x.npy").string(), y = (d.path / "y.npy").string();
  write_file(x, mlp_samples(20));
  std::vector<float> float_labels(20, 1.0f);
  write_file(y, npy_bytes("<f4", {20}, raw_bytes(float_labels)));
  std::string why = thrown([&] { open_dataset("npy:" + x + "," + y, "", m); });
  EXPECT_NE(why.find("y.npy holds labels of dtype <f4"), std::string::npos) << why;
  write_file(y, npy_bytes("<c8", {20}, std::string(160, '\0')));
  why = thrown([&] { open_dataset("npy:" + x + "," + y, "", m); });
  EXPECT_NE(why.find("y.npy has dtype '<c8'"), std::string::npos) << why;
  write_file(y, mlp_labels(19));
  EXPECT_NE(thrown([&] { open_dataset("npy:" + x + "," + y, "", m); }).find("19 labels"), std::string::npos);
  std::vector<int64_t> big(20, 10);
  write_file(y, npy_bytes("<i8", {20}, raw_bytes(big)));
  EXPECT_NE(thrown([&] { open_dataset("npy:" + x + "," + y, "", m); }).find("label 10"), std::string::npos);
  write_file(y, mlp_labels(20));
  const std::string whole = mlp_samples(20);
  write_file(x, whole.substr(0, whole.size() - 4));
  why = thrown([&] { open_dataset("npy:" + x + "," + y, "", m); });
  EXPECT_NE(why.find("truncated"), std::string::npos) << why;
  write_file(x, "not numpy");
  EXPECT_NE(thrown([&] { open_dataset("npy:" + x + "," + y, "", m); }).find("not a .npy file"), std::string::npos);
  write_file(d.path / "bad.npz", "PK not a zip");
  EXPECT_NE(thrown([&] { open_dataset("npy:" + (d.path / "bad.npz").string(), "", m); }).find("not a zip"),
            std::string::npos);
  write_file(x, npy_bytes("<f4", {20, 3, 28, 28}, std::string(20 * 3 * 784 * 4, '\0')));
  EXPECT_NE(thrown([&] { open_dataset("npy:" + x + "," + y, "", m); }).find("takes [1, 28, 28]"), std::string::npos);
  // A NaN input would surface as a diverged loss blamed on --lr.
  std::vector<float> samples(20 * 784, 0.5f);
  samples[3 * 784 + 5] = std::nanf("");
  write_file(x, npy_bytes("<f4", {20, 1, 28, 28}, raw_bytes(samples)));
  why = thrown([&] { open_dataset("npy:" + x + "," + y, "", m); });
  EXPECT_NE(why.find("x.npy holds nan in sample 3: inputs must be finite"), std::string::npos) << why;
  // Image options do nothing to arrays: refused, not ignored.
  write_file(x, mlp_samples(20));
  why = thrown([&] { open_dataset("npy:" + x + "," + y, "", m, parse_data_options("mean=0.5")); });
  EXPECT_NE(why.find("--data-options mean applies to images: folders"), std::string::npos) << why;
}

Model gpt_tiny() {
  return build_model(zoo_spec("gpt-mini", {{"vocab", 50}, {"context", 8}, {"width", 16}, {"depth", 1}, {"heads", 2}}));
}

std::vector<uint16_t> token_stream(int n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[static_cast<size_t>(i)] = static_cast<uint16_t>((i * 7) % 50);
  return t;
}

TEST(Tokens, RawStreamWindowsWithTheLastTenthHeldOut) {
  Scratch d("tokens");
  write_file(d.path / "corpus.bin", raw_bytes(token_stream(1000)));
  DataSplits s = open_dataset("tokens:" + (d.path / "corpus.bin").string(), "", gpt_tiny());
  EXPECT_EQ(s.train->size(), (900 - 1) / 8);
  EXPECT_EQ(s.test->size(), (100 - 1) / 8);
  const std::vector<int64_t> one = {2};
  Tensor x = s.train->inputs(one), y = s.train->labels(one);
  EXPECT_EQ(x.data<int32_t>()[0], (16 * 7) % 50);
  EXPECT_EQ(y.data<int32_t>()[0], (17 * 7) % 50);
}

TEST(Tokens, NanoGptValBinAndLlmcHeader) {
  Scratch d("tokens_layouts");
  write_file(d.path / "train.bin", raw_bytes(token_stream(400)));
  write_file(d.path / "val.bin", raw_bytes(token_stream(90)));
  DataSplits s = open_dataset("tokens:" + (d.path / "train.bin").string(), "", gpt_tiny());
  EXPECT_EQ(s.train->size(), 399 / 8);
  EXPECT_EQ(s.test->size(), 89 / 8);
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = 300;
  write_file(d.path / "tiny_train.bin", raw_bytes(header) + raw_bytes(token_stream(300)));
  write_file(d.path / "tiny_val.bin", raw_bytes(header) + raw_bytes(token_stream(300)));
  EXPECT_EQ(open_dataset("tokens:" + (d.path / "tiny_train.bin").string(), "", gpt_tiny()).test->size(), 299 / 8);
}

TEST(Tokens, BadInputsNameTheFileAndWhatIsWrong) {
  Scratch d("bad_tokens");
  const std::string f = (d.path / "c.bin").string();
  write_file(f, raw_bytes(token_stream(1000)) + "x");
  std::string why = thrown([&] { open_dataset("tokens:" + f, "", gpt_tiny()); });
  EXPECT_NE(why.find("c.bin has 2001 bytes, an odd count"), std::string::npos) << why;
  auto big = token_stream(1000);
  big[500] = 50;
  write_file(f, raw_bytes(big));
  why = thrown([&] { open_dataset("tokens:" + f, "", gpt_tiny()); });
  EXPECT_NE(why.find("holds token 50 at position 500"), std::string::npos) << why;
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 1, header[2] = 300;
  write_file(f, raw_bytes(header) + raw_bytes(token_stream(200)));
  EXPECT_NE(thrown([&] { open_dataset("tokens:" + f, "", gpt_tiny()); }).find("counts 300 tokens"), std::string::npos);
  write_file(f, raw_bytes(token_stream(50)));
  EXPECT_NE(thrown([&] { open_dataset("tokens:" + f, "", gpt_tiny()); }).find("fewer than one window"),
            std::string::npos);
  EXPECT_NE(thrown([&] { open_dataset("tokens:" + f, "", cnn(10)); }).find("trains language models"),
            std::string::npos);
  EXPECT_NE(thrown([&] { open_dataset("tokens:/nonexistent.bin", "", gpt_tiny()); }).find("not found"),
            std::string::npos);
  write_file(f, raw_bytes(token_stream(1000)));
  why = thrown([&] { open_dataset("tokens:" + f, "", gpt_tiny(), parse_data_options("val=0.6")); });
  EXPECT_NE(why.find("val must be in (0, 0.5]"), std::string::npos) << why;
  why = thrown([&] { open_dataset("tokens:" + f, "", gpt_tiny(), parse_data_options("augment=1")); });
  EXPECT_NE(why.find("--data-options augment applies to images: folders"), std::string::npos) << why;
}

// Loader threads fetch at once: synthetic prototypes are made on first use
// by whichever thread asks, and must come out as a lone thread makes them.
TEST(Synthetic, ConcurrentFetchesGiveTheBitsOfASerialOne) {
  const Model m = build_model(zoo_spec("vgg-mini", {{"classes", 50}}));
  DataSplits serial = open_dataset("synthetic", "", m), shared = open_dataset("synthetic", "", m);
  const std::vector<int64_t> idx = iota(64);
  std::vector<Tensor> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { got[static_cast<size_t>(t)] = shared.train->inputs(idx); });
  for (auto& t : threads) t.join();
  const Tensor want = serial.train->inputs(idx);
  for (const Tensor& g : got) EXPECT_TRUE(same_bits(g, want));
  EXPECT_TRUE(same_bits(shared.test->inputs(idx), serial.test->inputs(idx)));
}

TEST(BatchLoader, HandsOutItemsInOrderWhateverThreadMadeThem) {
  for (int threads : {0, 1, 3}) {
    BatchLoader loader([](int64_t i) { return Batch{Tensor::full({1}, float(i)), Tensor{}}; }, 5, 40, threads, 4);
    for (int64_t i = 5; i < 40; ++i) ASSERT_EQ(loader.next().inputs.f32()[0], float(i)) << threads << " threads";
  }
}

TEST(BatchLoader, RethrowsTheErrorOfTheItemThatFailedAndStopsCleanly) {
  BatchLoader loader(
      [](int64_t i) {
        if (i == 3) throw UserError("item 3 is broken");
        return Batch{Tensor::full({1}, float(i)), Tensor{}};
      },
      0, 100, 2);
  for (int i = 0; i < 3; ++i) loader.next();
  EXPECT_EQ(thrown([&] { loader.next(); }), "item 3 is broken");
  // The destructor joins threads that are waiting for room in the queue.
}

}  // namespace
}  // namespace pd
