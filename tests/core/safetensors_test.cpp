// safetensors: round trip, metadata, atomic write, malformed files.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <cstring>
#include <unistd.h>

#include "core/error.h"
#include "core/safetensors.h"

namespace pd {
namespace {

namespace fs = std::filesystem;

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

fs::path temp_dir(const std::string& sub = "") {
  static ScratchDir scratch("pd_safetensors_");
  fs::path d = scratch.path / sub;
  fs::create_directories(d);
  return d;
}

void write_raw(const fs::path& p, const std::string& header, const std::string& data) {
  std::ofstream f(p, std::ios::binary);
  uint64_t n = header.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f << header << data;
}

TEST(Safetensors, RoundTripKeepsNamesOrderShapesDtypesAndBytes) {
  fs::path path = temp_dir("roundtrip") / "rt.safetensors";
  Tensor w = Tensor::from_floats({1.5f, -2.0f, 3.25f, 0.0f, 1e-30f, -0.0f}, {2, 3});
  Tensor b = Tensor::from_floats({7.0f}, {1});
  Tensor ids = Tensor::from_ints({1, -2, 3}, {3});
  Tensor big = Tensor::empty({2}, DType::I64);
  big.data<int64_t>()[0] = int64_t{1} << 40;
  big.data<int64_t>()[1] = -5;
  Tensor scalar = Tensor::from_floats({42.0f}, {});
  Tensor empty = Tensor::zeros({0, 4});
  NamedTensors in{{"4.conv1.weight", w}, {"0.bias", b}, {"ids", ids}, {"big", big}, {"s", scalar}, {"e", empty}};
  save_safetensors(path.string(), in, {{"step", "12"}, {"model", "cnn"}});

  std::map<std::string, std::string> meta;
  NamedTensors out = load_safetensors(path.string(), &meta);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out[i].first, in[i].first);
    EXPECT_EQ(out[i].second.shape(), in[i].second.shape());
    EXPECT_EQ(out[i].second.dtype(), in[i].second.dtype());
    ASSERT_EQ(out[i].second.nbytes(), in[i].second.nbytes());
    if (in[i].second.nbytes())
      EXPECT_EQ(0, std::memcmp(out[i].second.raw(), in[i].second.raw(), in[i].second.nbytes()));
  }
  EXPECT_EQ(meta["step"], "12");
  EXPECT_EQ(meta["model"], "cnn");
  // No temp file is left behind.
  int files = 0;
  for (const auto& e : fs::directory_iterator(path.parent_path())) files += e.path().filename() != "rt.safetensors";
  EXPECT_EQ(files, 0);
}

TEST(Safetensors, HeaderIsAlignedAndReadableAsStandardFormat) {
  fs::path path = temp_dir() / "std.safetensors";
  save_safetensors(path.string(), {{"x", Tensor::from_floats({1, 2, 3}, {3})}});
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  std::string header(n, '\0');
  f.read(header.data(), static_cast<std::streamsize>(n));
  EXPECT_NE(header.find("\"dtype\":\"F32\""), std::string::npos);
  EXPECT_NE(header.find("\"data_offsets\":[0,12]"), std::string::npos);
  EXPECT_EQ(fs::file_size(path), 8 + n + 12);
}

TEST(Safetensors, OverwriteReplacesWholeFile) {
  fs::path path = temp_dir() / "ow.safetensors";
  save_safetensors(path.string(), {{"x", Tensor::zeros({100})}});
  save_safetensors(path.string(), {{"y", Tensor::from_floats({5}, {1})}});
  NamedTensors out = load_safetensors(path.string());
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].first, "y");
}

TEST(Safetensors, MalformedFilesAreUserErrors) {
  fs::path d = temp_dir();
  EXPECT_THROW(load_safetensors((d / "missing.safetensors").string()), UserError);

  { std::ofstream((d / "short").string()) << "abc"; }
  EXPECT_THROW(load_safetensors((d / "short").string()), UserError);

  write_raw(d / "notjson", "{not json", "");
  EXPECT_THROW(load_safetensors((d / "notjson").string()), UserError);

  {  // header length larger than the file
    std::ofstream f(d / "hugelen", std::ios::binary);
    uint64_t n = 1ull << 40;
    f.write(reinterpret_cast<const char*>(&n), 8);
    f << "{}";
  }
  EXPECT_THROW(load_safetensors((d / "hugelen").string()), UserError);

  write_raw(d / "outside", R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", std::string(8, '\0'));
  EXPECT_THROW(load_safetensors((d / "outside").string()), UserError);

  write_raw(d / "shape", R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_THROW(load_safetensors((d / "shape").string()), UserError);

  write_raw(d / "dtype", R"({"x":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", std::string(8, '\0'));
  EXPECT_THROW(load_safetensors((d / "dtype").string()), UserError);

  write_raw(d / "fields", R"({"x":{"dtype":"F32"}})", "");
  EXPECT_THROW(load_safetensors((d / "fields").string()), UserError);

  write_raw(d / "meta", R"({"__metadata__":{"a":1}})", "");
  EXPECT_THROW(load_safetensors((d / "meta").string()), UserError);
}

// The message of the UserError load_safetensors throws on `path`.
std::string load_error(const fs::path& path) {
  try {
    load_safetensors(path.string());
  } catch (const UserError& e) {
    return e.what();
  }
  return "(no UserError)";
}

TEST(Safetensors, OverlappingDataOffsetsAreRefused) {
  fs::path d = temp_dir();
  write_raw(d / "overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                              "b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", std::string(12, '\0'));
  EXPECT_NE(load_error(d / "overlap").find("overlap"), std::string::npos) << load_error(d / "overlap");
  EXPECT_THROW(read_safetensors_metadata((d / "overlap").string()), UserError);
}

TEST(Safetensors, HugeNumbersInTheHeaderNameTheField) {
  fs::path d = temp_dir();
  // 2^64 + 4 is read as a float by the JSON parser; 2^62 x 2^62 elements wrap.
  write_raw(d / "offset", R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[18446744073709551620,4]}})",
            std::string(8, '\0'));
  EXPECT_NE(load_error(d / "offset").find("data_offsets[0]"), std::string::npos) << load_error(d / "offset");
  write_raw(d / "numel", R"({"x":{"dtype":"F32","shape":[4611686018427387904,4],"data_offsets":[0,0]}})", "");
  EXPECT_NE(load_error(d / "numel").find("shape[0]"), std::string::npos) << load_error(d / "numel");
  write_raw(d / "fraction", R"({"x":{"dtype":"F32","shape":[1.5],"data_offsets":[0,4]}})", std::string(8, '\0'));
  EXPECT_NE(load_error(d / "fraction").find("shape[0]"), std::string::npos) << load_error(d / "fraction");
}

TEST(Safetensors, SavingOverAFolderLeavesNothingBehind) {
  fs::path d = temp_dir("folder_target");
  fs::create_directories(d / "w.safetensors");
  EXPECT_THROW(save_safetensors((d / "w.safetensors").string(), {{"x", Tensor::zeros({4})}}), UserError);
  int entries = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(d)) ++entries;
  EXPECT_EQ(entries, 1);
}

}  // namespace
}  // namespace pd
