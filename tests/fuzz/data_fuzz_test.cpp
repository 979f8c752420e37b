// The readers of a user's data (npy:, npz, tokens:, images:) on mutated
// valid files (mutator.h): opening the data set and reading samples from
// both splits ends in the data or a UserError naming the file, never
// another exception, a crash or a hang. The image decoders (libpng,
// libjpeg) run lazily, so the samples are read, not only the index.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <numeric>

#include "models/dataset.h"
#include "models/model.h"
#include "tests/fuzz/mutator.h"
#include "tests/models/data_files.h"

namespace pd::fuzz {
namespace {

namespace fs = std::filesystem;
using pd::testing::npy_bytes;
using pd::testing::raw_bytes;
using pd::testing::zip_bytes;

constexpr int kCases = 300;  // each case opens a data set: fewer than the text readers' 1000

fs::path scratch() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("pd_datafuzz_" + std::to_string(::getpid()));
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

Model cnn10() { return build_model(zoo_spec("cnn", {{"classes", 10}})); }
Model gpt_tiny() {
  return build_model(zoo_spec("gpt-mini", {{"vocab", 50}, {"context", 8}, {"width", 16}, {"depth", 1}, {"heads", 2}}));
}

// Opens `source` and reads up to 8 samples of each split.
void open_and_read(const std::string& source, const Model& m) {
  DataSplits s = open_dataset(source, "", m, parse_data_options("augment=0"));
  for (const Dataset* d : {s.train.get(), s.test.get()}) {
    if (!d) continue;
    std::vector<int64_t> idx(static_cast<size_t>(std::min<int64_t>(d->size(), 8)));
    std::iota(idx.begin(), idx.end(), 0);
    if (idx.empty()) continue;
    d->inputs(idx);
    d->labels(idx);
  }
}

// Mutates the bytes of `file` (the other files of the source stay valid).
void fuzz_data_file(const std::string& name, const fs::path& file, const std::string& seed_bytes, uint64_t seed,
                    const std::function<void()>& read) {
  FuzzResult r = run_fuzz(name, {seed_bytes}, kCases, seed, [&](const std::string& bytes) {
    pd::testing::write_file(file, bytes);
    read();
  });
  pd::testing::write_file(file, seed_bytes);
  std::printf("fuzz %s: %d cases, %d accepted, %d refused, %zu failures\n", name.c_str(), kCases, r.accepted,
              r.refused, r.failures.size());
  EXPECT_GT(r.refused, 0) << "no mutation was refused: is the reader checking anything?";
  std::string list;
  for (const auto& f : r.failures) list += "\n  " + f;
  EXPECT_TRUE(r.failures.empty()) << name << ":" << list;
}

std::string images_npy(int n) {
  std::vector<float> x(static_cast<size_t>(n) * 28 * 28);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 251) / 251.0f;
  return npy_bytes("<f4", {n, 1, 28, 28}, raw_bytes(x));
}
std::string labels_npy(int n) {
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) y[static_cast<size_t>(i)] = i % 10;
  return npy_bytes("<i8", {n}, raw_bytes(y));
}

TEST(FuzzData, NpyInputsAndLabels) {
  const fs::path x = scratch() / "x.npy", y = scratch() / "y.npy";
  const std::string xs = images_npy(20), ys = labels_npy(20);
  pd::testing::write_file(x, xs);
  pd::testing::write_file(y, ys);
  const std::string source = "npy:" + x.string() + "," + y.string();
  ASSERT_NO_THROW(open_and_read(source, cnn10()));
  const Model m = cnn10();
  fuzz_data_file("npy-inputs", x, xs, 21, [&] { open_and_read(source, m); });
  fuzz_data_file("npy-labels", y, ys, 22, [&] { open_and_read(source, m); });
}

TEST(FuzzData, NpzStoredAndDeflated) {
  const Model m = cnn10();
  for (bool compressed : {false, true}) {
    const fs::path z = scratch() / (compressed ? "c.npz" : "s.npz");
    const std::string zs = zip_bytes({{"x.npy", images_npy(12)}, {"y.npy", labels_npy(12)}}, compressed);
    pd::testing::write_file(z, zs);
    ASSERT_NO_THROW(open_and_read("npy:" + z.string(), m)) << z;
    fuzz_data_file(compressed ? "npz-deflated" : "npz-stored", z, zs, compressed ? 24 : 23,
                   [&] { open_and_read("npy:" + z.string(), m); });
  }
}

TEST(FuzzData, TokenStreams) {
  const fs::path t = scratch() / "corpus.bin";
  std::vector<uint16_t> tokens(400);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<uint16_t>((i * 7) % 50);
  const std::string ts = raw_bytes(tokens);
  pd::testing::write_file(t, ts);
  const Model m = gpt_tiny();
  ASSERT_NO_THROW(open_and_read("tokens:" + t.string(), m));
  fuzz_data_file("tokens", t, ts, 25, [&] { open_and_read("tokens:" + t.string(), m); });
}

TEST(FuzzData, PngAndJpegImages) {
  const fs::path root = scratch() / "images";
  fs::remove_all(root);
  pd::testing::write_image_folder(root, 2, 10, 1);
  const Model m = build_model(zoo_spec("cnn", {{"classes", 2}}));
  ASSERT_NO_THROW(open_and_read("images:" + root.string(), m));
  // The first class's first two images, which the training split reads first.
  const fs::path jpg = root / "class0" / "img000.jpg", png = root / "class0" / "img001.png";
  const std::string pngs = read_text(png.string()), jpgs = read_text(jpg.string());
  fuzz_data_file("png", png, pngs, 26, [&] { open_and_read("images:" + root.string(), m); });
  fuzz_data_file("jpeg", jpg, jpgs, 27, [&] { open_and_read("images:" + root.string(), m); });
}

}  // namespace
}  // namespace pd::fuzz
