// Hostile and unusual data files given to the data readers (npy:, .npz,
// tokens:, images:), to --data-options and to --init's safetensors: each
// is read correctly or refused with a UserError naming the file and what
// is wrong; never a crash (a regex overflowed the stack on deep .npy
// headers), a hang (a FIFO), an allocation of what the file merely claims,
// or a silent misreading (u8 token ids read with a 1-byte stride).
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <numeric>

#include "core/cpu/host_allocator.h"
#include "core/safetensors.h"
#include "models/dataset.h"
#include "models/model.h"
#include "models/parameters.h"
#include "tests/fuzz/mutator.h"
#include "tests/models/data_files.h"
#include "tests/user_error_of.h"

namespace pd::fuzz {
namespace {

namespace fs = std::filesystem;
using pd::testing::npy_bytes;
using pd::testing::raw_bytes;
using pd::testing::write_file;
using pd::testing::zip_bytes;

struct Scratch {
  fs::path path;
  explicit Scratch(const std::string& name)
      : path(fs::temp_directory_path() / ("pd_hostile_data_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

Model mlp() { return build_model(zoo_spec("mlp")); }
Model gpt_tiny() {
  return build_model(zoo_spec("gpt-mini", {{"vocab", 50}, {"context", 8}, {"width", 16}, {"depth", 1}, {"heads", 2}}));
}

std::string samples(int n) { return npy_bytes("<f4", {n, 1, 28, 28}, std::string(size_t(n) * 784 * 4, '\0')); }
std::string labels(int n) {
  std::vector<int64_t> y(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) y[static_cast<size_t>(i)] = i % 10;
  return npy_bytes("<i8", {n}, raw_bytes(y));
}

// A .npy file whose header is `dict` (version 2: a 4-byte length) and data `data`.
std::string npy_with_header(const std::string& dict, const std::string& data, int version = 1) {
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  const uint32_t n = static_cast<uint32_t>(dict.size());
  out += static_cast<char>(n & 0xFF);
  out += static_cast<char>((n >> 8) & 0xFF);
  if (version >= 2) {
    out += static_cast<char>((n >> 16) & 0xFF);
    out += static_cast<char>(n >> 24);
  }
  return out + dict + data;
}

// The UserError of opening `source` for `m`, or a note that there was none.
std::string refusal(const std::string& source, const Model& m, const std::string& options = "") {
  return pd::testing_support::error_of([&] {
    DataSplits s = open_dataset(source, "", m, parse_data_options(options));
    std::vector<int64_t> idx(static_cast<size_t>(std::min<int64_t>(s.train->size(), 4)));
    std::iota(idx.begin(), idx.end(), 0);
    s.train->inputs(idx);
  });
}

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << "expected '" << (part) << "' in: " << (text)

// A regex used to parse the header: these overflowed its recursion (SIGSEGV).
TEST(HostileData, NpyHeadersDeepLongOrMalformedAreRefusedNamingTheFile) {
  Scratch d("npy_headers");
  const std::string x = (d.path / "x.npy").string(), y = (d.path / "y.npy").string();
  write_file(y, labels(4));
  const std::string data(4 * 784 * 4, '\0');
  const std::string open_parens = std::string(30000, '(');
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': " + open_parens + "4, 1, 28, 28), }",
       "has something other than a non-negative integer in its shape"},
      {"{'descr': '" + std::string(60000, 'f') + "', 'fortran_order': False, 'shape': (4, 1, 28, 28), }",
       "has a string longer than"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (-4, 1, 28, 28), }", "has a negative dimension"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': '(4, 1, 28, 28)', }", "expects 'shape' to be a tuple"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4 1 28 28), }", "expects ',' between"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (4, 1, 28, 28), }", "'fortran_order' to be True or False"},
      {"{'descr': '<f4', 'fortran_order': Falsehood, 'shape': (4, 1, 28, 28), }", "',' or '}' after a value"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 1, 28, 28), 'shape': (4,), }", "has key 'shape' twice"},
      {"{'descr': '<f4', 'fortran_order': False, }", "lacks 'shape'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 1, 28, 28), 'extra': 1}", "has key 'extra'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 1, 28, 28)} junk", "text after its closing"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (4, 1, 28, 28), }", "is in Fortran order"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4, 1, 28, 28", "expects ',' between"},
  };
  for (const auto& [dict, want] : cases) {
    write_file(x, npy_with_header(dict, data, dict.size() > 65535 ? 2 : 1));
    const std::string e = refusal("npy:" + x + "," + y, mlp());
    EXPECT_HAS(e, x);
    EXPECT_HAS(e, want);
  }
  // Longer than the format's cap (version 2 could say 4 GB).
  write_file(x, npy_with_header(std::string(70000, ' '), data, 2));
  EXPECT_HAS(refusal("npy:" + x + "," + y, mlp()), "has a header of 70000 bytes; at most 65535");
  // A valid shape padded with 60,000 spaces is valid: read.
  write_file(x, npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (4, 1, 28, 28), }" +
                                    std::string(60000, ' ') + "\n", data));
  EXPECT_EQ(open_dataset("npy:" + x + "," + y, "", mlp(), parse_data_options("val=0.5")).train->size(), 2);
}

// Every reader's file given as a FIFO (used to block forever), a socket, a
// folder, a device, a symlink loop or a missing file: refused, naming it.
TEST(HostileData, FifosSocketsFoldersDevicesAndSymlinkLoopsAreRefusedNamingThePath) {
  Scratch d("special");
  const fs::path fifo = d.path / "fifo.npy", folder = d.path / "folder.npy", loop = d.path / "loop.npy",
                 sock = d.path / "sock.npy", zero = d.path / "zero.npy";
  fs::create_symlink("/dev/zero", zero);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  fs::create_directories(folder);
  fs::create_symlink(loop, loop);
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof addr.sun_path - 1);
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const std::string y = (d.path / "y.npy").string(), x = (d.path / "x.npy").string();
  write_file(y, labels(4));
  write_file(x, samples(4));
  const std::vector<std::pair<std::string, std::string>> specials = {
      {fifo.string(), "is not a regular file"}, {sock.string(), "is not a regular file"},
      {folder.string(), "is a folder"},         {zero.string(), "is not a regular file"},
      {loop.string(), "Too many levels of symbolic links"}};
  for (const auto& [path, why] : specials) {
    for (const std::string& source : {"npy:" + path + "," + y, "npy:" + x + "," + path}) {
      const std::string e = refusal(source, mlp());
      EXPECT_HAS(e, path);
      EXPECT_HAS(e, why);
    }
    // Names ending in .npz / .bin / .png are what select those readers.
    const fs::path npz = d.path / "data.npz", tokens = d.path / "train.bin", val = d.path / "val.bin";
    const fs::path image = d.path / "images" / "a" / "x.png";
    for (const fs::path& link : {npz, tokens, val}) {
      std::error_code ec;
      fs::remove(link, ec);
      fs::create_symlink(path, link);
    }
    std::string good;
    for (int i = 0; i < 200; ++i) good += std::string("\x01\x00", 2);
    write_file(d.path / "good.bin", good);
    fs::remove_all(d.path / "images");
    fs::create_directories(image.parent_path());
    fs::create_symlink(path, image);
    const std::vector<std::pair<std::string, std::function<Model()>>> sources = {
        {"npy:" + npz.string(), mlp},
        {"tokens:" + tokens.string(), gpt_tiny},
        {"images:" + (d.path / "images").string(), [] { return build_model(zoo_spec("cnn", {{"classes", 2}})); }}};
    for (const auto& [source, model] : sources) {
      const std::string e = refusal(source, model());
      EXPECT_HAS(e, source.substr(source.find(':') + 1));
      EXPECT_NE(e.find(why == "is a folder" ? "folder" : why),
                std::string::npos)
          << source << " -> " << path << ": " << e;
    }
    // The validation file beside a good train.bin.
    fs::remove(tokens);
    fs::copy_file(d.path / "good.bin", tokens);
    const std::string e = refusal("tokens:" + tokens.string(), gpt_tiny());
    EXPECT_HAS(e, val.string());
  }
  ::close(s);
}

TEST(HostileData, ImageFolderEntriesThatAreNotImageFilesAreRefusedLikeNotesTxt) {
  Scratch d("image_entries");
  const Model m = build_model(zoo_spec("cnn", {{"classes", 2}}));
  const std::string src = "images:" + d.path.string();
  pd::testing::write_image_folder(d.path, 2, 4, 1);
  const fs::path entry = d.path / "class0" / "x.png";
  auto check = [&](const std::string& want) {
    const std::string e = refusal(src, m);
    EXPECT_HAS(e, entry.string());
    EXPECT_HAS(e, want);
    std::error_code ec;
    fs::remove_all(entry, ec);
  };
  ASSERT_EQ(::mkfifo(entry.c_str(), 0600), 0);
  check("is not a regular file");
  fs::create_symlink(d.path / "nowhere.png", entry);
  check("a symlink to nothing");
  fs::create_symlink("/dev/zero", entry);
  check("is not a regular file");
  fs::create_symlink(entry, entry);
  check("Too many levels of symbolic links");
  fs::create_directories(entry);
  check("is not a regular file");
  // A class folder that is a symlink loop.
  fs::create_symlink(d.path / "class2", d.path / "class2");
  const std::string e = refusal(src, m);
  EXPECT_HAS(e, (d.path / "class2").string());
  fs::remove(d.path / "class2");
  // A sparse 20 GB "image": refused by its size, not read.
  write_file(entry, "\x89PNG\r\n\x1a\n");
  fs::resize_file(entry, uint64_t{20} << 30);
  check("image files of at most 1.07 GB are read");
}

// The same ids in every integer dtype give the same samples (u8 was read
// with a 1-byte stride), negative ids are refused in every signed dtype,
// and ids >= vocab when the data is read, naming the file.
TEST(HostileData, EveryIntegerDtypeHoldingValidTokenIdsReadsTheSameTokens) {
  Scratch d("token_dtypes");
  const Model m = gpt_tiny();
  const int n = 20, t = 8;
  std::vector<int64_t> ids(static_cast<size_t>(n * t));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int64_t>((i * 7 + 3) % 50);
  auto encode = [&](const std::string& descr, const std::vector<int64_t>& v) {
    const size_t es = static_cast<size_t>(descr[2] - '0');
    std::string bytes;
    for (int64_t x : v) bytes += std::string(reinterpret_cast<const char*>(&x), es);  // little-endian host
    return npy_bytes(descr, {n, t}, bytes);
  };
  const std::string x = (d.path / "x.npy").string(), y = (d.path / "y.npy").string();
  Tensor want_x, want_y;
  for (const std::string descr : {"|u1", "|i1", "<u2", "<i2", "<u4", "<i4", "<u8", "<i8"}) {
    write_file(x, encode(descr, ids));
    write_file(y, encode(descr, ids));
    DataSplits s = open_dataset("npy:" + x + "," + y, "", m);
    std::vector<int64_t> all(static_cast<size_t>(s.train->size()));
    std::iota(all.begin(), all.end(), 0);
    const Tensor got_x = s.train->inputs(all), got_y = s.train->labels(all);
    if (!want_x.defined()) {
      want_x = got_x, want_y = got_y;
      EXPECT_EQ(got_x.data<int32_t>()[1], (1 * 7 + 3) % 50);
      continue;
    }
    EXPECT_EQ(std::memcmp(got_x.raw(), want_x.raw(), want_x.nbytes()), 0) << descr;
    EXPECT_EQ(std::memcmp(got_y.raw(), want_y.raw(), want_y.nbytes()), 0) << descr;
  }
  for (const std::string descr : {"|i1", "<i2", "<i4", "<i8"}) {
    std::vector<int64_t> bad = ids;
    bad[13] = -3;
    write_file(x, encode(descr, bad));
    write_file(y, encode(descr, ids));
    const std::string e = refusal("npy:" + x + "," + y, m);
    EXPECT_HAS(e, x + " holds token id -3 at element 13; ids must be in [0, 50)");
  }
  for (const std::string descr : {"|u1", "<u2", "<u8"}) {
    std::vector<int64_t> bad = ids;
    bad[17] = descr == "<u8" ? -1 : 50;  // u8: 2^64 - 1
    write_file(x, encode(descr, bad));
    const std::string e = refusal("npy:" + x + "," + y, m);
    EXPECT_HAS(e, x + " holds token id ");
    EXPECT_HAS(e, "at element 17");
  }
}

// A zip member whose bytes do not match its CRC, one name twice, one that
// says it inflates to more than it does, and a bomb whose contents are not
// a .npy: refused before (or instead of) allocating what it claims.
TEST(HostileData, NpzWithBadCrcDuplicateMembersOrBombsIsRefused) {
  Scratch d("npz");
  const fs::path z = d.path / "d.npz";
  for (bool compressed : {false, true}) {
    std::string bytes = zip_bytes({{"x.npy", samples(4)}, {"y.npy", labels(4)}}, compressed);
    // Inside y's data (after its 128-byte .npy header), or its deflate stream's end.
    const size_t y_data = compressed ? bytes.find("PK\x01\x02") - 3 : bytes.find("y.npy") + 5 + 140;
    bytes[y_data] = static_cast<char>(bytes[y_data] ^ 0x01);
    write_file(z, bytes);
    const std::string e = refusal("npy:" + z.string(), mlp(), "val=0.5");
    EXPECT_HAS(e, z.string() + ":y");
    EXPECT_TRUE(e.find("CRC-32") != std::string::npos || e.find("inflate") != std::string::npos) << e;
  }
  // Two members of one name: the zip writer below keeps both (a map cannot).
  std::string two = zip_bytes({{"x.npy", samples(4)}, {"y.npy", labels(4)}}, false);
  for (size_t at = 0; (at = two.find("y.npy", at)) != std::string::npos; at += 5) two[at] = 'x';
  write_file(z, two);
  EXPECT_HAS(refusal("npy:" + z.string(), mlp()), "holds zip member x.npy twice");
  // A bomb: 64 MB of zeros (not a .npy) deflated to 64 KB.
  const std::string zeros(size_t{64} << 20, '\0');
  write_file(z, zip_bytes({{"x.npy", zeros}, {"y.npy", labels(4)}}, true));
  EXPECT_HAS(refusal("npy:" + z.string(), mlp()), z.string() + ":x is not a .npy file");
}

TEST(HostileData, DataOptionsDuplicateEmptyOrNonFiniteAreRefused) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"mean=0.1/0.2,mean=0.3", "key 'mean' is given twice"},
      {"mean=", "mean: a value is empty"},
      {"std=", "std: a value is empty"},
      {"mean=0.1//0.2", "mean: a value is empty"},
      {"std=abc", "'abc' is not a number"},
      {"std=1e39", "beyond the float range"},
      {"std=1e-46", "below the smallest float"},
      {"val=0.1,val=0.2", "key 'val' is given twice"}};
  for (const auto& [options, want] : cases) EXPECT_HAS(pd::testing_support::error_of([&] { parse_data_options(options); }), want);
  EXPECT_FLOAT_EQ(parse_data_options("std=1e-38").std[0], 1e-38f);
  Scratch d("options");
  pd::testing::write_image_folder(d.path, 2, 4, 1);
  const Model m = build_model(zoo_spec("cnn", {{"classes", 2}}));
  const std::string e = refusal("images:" + d.path.string(), m, "mean=1e38,std=1e-30");
  EXPECT_HAS(e, "make a pixel of 0 into -inf: the inputs must be finite");
  EXPECT_NO_THROW(open_dataset("images:" + d.path.string(), "", m, parse_data_options("std=1e-38,val=0.5")));
}

// --init / evaluate --weights: names and shapes are matched from the
// header, so a file of other tensors is refused before its data is read;
// one name twice, or a NaN, is refused naming the file and tensor.
TEST(HostileData, SafetensorsDuplicateNamesForeignTensorsAndNanWeightsAreRefused) {
  Scratch d("weights");
  const Model m = mlp();
  const std::string w = (d.path / "w.safetensors").string();
  save_safetensors(w, {{"a", Tensor::zeros({2})}, {"b", Tensor::zeros({2})}});
  std::string bytes = pd::fuzz::read_text(w);
  const size_t at = bytes.find("\"b\"");
  bytes[at + 1] = 'a';
  write_file(w, bytes);
  EXPECT_HAS(pd::testing_support::error_of([&] { load_safetensors(w); }), "names tensor 'a' twice");
  // A sparse 20 GB tensor of another model: refused from the header alone.
  const std::string header = R"({"huge": {"dtype": "F32", "shape": [5368709120], "data_offsets": [0, 21474836480]}})";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  write_file(w, file + header);
  fs::resize_file(w, 8 + header.size() + (uint64_t{20} << 30));
  std::string e = pd::testing_support::error_of([&] { load_named_weights(m, {w}); });
  EXPECT_HAS(e, w + ": 1 tensor is not in mlp: 'huge'");
  // NaN in a weight: named, not blamed on the learning rate later.
  NamedTensors good = load_named_weights(m, {[&] {
                                           ParameterStore p = ParameterStore::create(m, 0, m.size() - 1, 1, Device::cpu());
                                           save_safetensors(w, p.named_tensors());
                                           return w;
                                         }()});
  NamedTensors bad = good;
  bad[1].second = bad[1].second.clone();
  bad[1].second.f32()[3] = std::numeric_limits<float>::infinity();
  save_safetensors(w, bad);
  e = pd::testing_support::error_of([&] { load_named_weights(m, {w}); });
  EXPECT_HAS(e, w + ": tensor '" + bad[1].first + "' holds inf at element 3; weights must be finite");
}

// ---- within the stated bounds ---------------------------------------------------

// Runs `read` in a child process whose address space may grow by `budget`
// bytes beyond what it maps when `read` starts (RLIMIT_AS, what `prlimit
// --as` sets): true when `read` returned; false when it threw a UserError
// holding `refusal` (any other end fails the test).
bool fits_in(uint64_t budget, const std::function<void()>& read, const std::string& refusal = "") {
  const pid_t pid = ::fork();
  if (pid == 0) {
    cpu::release_host_cache();  // blocks cached by earlier tests would serve the reader's
    std::ifstream statm("/proc/self/statm");
    uint64_t pages = 0;
    statm >> pages;
    const uint64_t cap = pages * static_cast<uint64_t>(::sysconf(_SC_PAGESIZE)) + budget;
    const rlimit as{cap, cap};
    if (::setrlimit(RLIMIT_AS, &as) != 0) ::_exit(3);
    try {
      read();
    } catch (const UserError& e) {
      const bool expected = !refusal.empty() && std::string(e.what()).find(refusal) != std::string::npos;
      if (!expected) std::fprintf(stderr, "under a cap of %llu bytes more: %s\n", (unsigned long long)budget, e.what());
      ::_exit(expected ? 1 : 2);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "under a cap of %llu bytes more: %s\n", static_cast<unsigned long long>(budget), e.what());
      ::_exit(2);
    }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) < 2) << "the reader did not return nor refuse naming the file";
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

// Each reader given a valid file loads it with no more address space than
// what it returns plus its bound in models/README.md, plus 16 MiB for the
// allocator's rounding and the libraries' own maps. The files are 64 MiB,
// so a reader that held another copy of its data would not fit.
TEST(HostileData, ValidFilesLoadWithinTheReadersStatedBoundsUnderACap) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "AddressSanitizer maps terabytes of shadow memory: no address-space cap fits it";
#endif
  Scratch d("bounds");
  const uint64_t slack = uint64_t{16} << 20;
  const int64_t rows = (int64_t{64} << 20) / 3136;
  const uint64_t data = uint64_t(rows) * 3136, labels_i32 = uint64_t(rows) * 4;
  std::vector<float> px(static_cast<size_t>(rows) * 784);
  for (size_t i = 0; i < px.size(); ++i) px[i] = static_cast<float>(i % 251) / 251.0f;
  std::string y(static_cast<size_t>(rows), '\0');
  for (int64_t i = 0; i < rows; ++i) y[static_cast<size_t>(i)] = static_cast<char>(i % 10);
  const std::string xs = npy_bytes("<f4", {rows, 1, 28, 28}, raw_bytes(px)), ys = npy_bytes("|u1", {rows}, y);
  px = {};
  const std::string x = (d.path / "x.npy").string(), yf = (d.path / "y.npy").string();
  write_file(x, xs);
  write_file(yf, ys);
  const Model m = mlp();
  auto load = [&](const std::string& source) {
    return [source, &m] {
      DataSplits s = open_dataset(source, "", m, parse_data_options(""));
      if (s.train->size() + s.test->size() != (int64_t{64} << 20) / 3136) throw std::runtime_error("wrong row count");
    };
  };
  // npy: returns the samples and labels (data + labels_i32); holds one
  // array's data as stored (data) beyond them.
  EXPECT_TRUE(fits_in(data + labels_i32 + data + slack, load("npy:" + x + "," + yf))) << "npy: x.npy,y.npy";
  // Less than that: refused naming the file (exit 2), not "out of host memory".
  EXPECT_FALSE(fits_in(data + labels_i32 + slack, load("npy:" + x + "," + yf), x + " needs ")) << "the cap does not bind";
  // .npz, deflated: the same, plus its 1 MiB inflate buffer, tail and directory.
  const std::string npz = (d.path / "data.npz").string();
  write_file(npz, zip_bytes({{"x.npy", xs}, {"y.npy", ys}}, true));
  EXPECT_TRUE(fits_in(data + labels_i32 + data + (uint64_t{1} << 20) + slack, load("npy:" + npz))) << "npy: .npz";
  // tokens: returns the stream (2 bytes a token); the training split keeps
  // the whole stream's capacity (val x the stream).
  const Model lm = gpt_tiny();
  const uint64_t tokens = uint64_t{32} << 20;
  std::string stream(2 * tokens, '\0');
  for (uint64_t i = 0; i < tokens; ++i) stream[2 * i] = static_cast<char>(i % 50);
  const std::string bin = (d.path / "data.bin").string();
  write_file(bin, stream);
  stream = {};
  EXPECT_TRUE(fits_in(2 * tokens + 2 * tokens / 10 + 1024 + slack, [&] {
    DataSplits s = open_dataset("tokens:" + bin, "", lm, parse_data_options(""));
    if (s.train->size() == 0) throw std::runtime_error("no windows");
  })) << "tokens";
  // images: the file list, then per fetch one image file and its decoded
  // pixels (a 2048 x 2048 RGB PNG: 12 MiB of pixels).
  const fs::path images = d.path / "images";
  pd::testing::write_image_folder(images, 2, 4, 1);
  pd::testing::write_png(images / "class0" / "big.png", 2048, 2048, 3, 1);
  const uint64_t big_png = fs::file_size(images / "class0" / "big.png"), pixels = uint64_t{2048} * 2048 * 3;
  const Model two = build_model(zoo_spec("mlp", {{"classes", 2}}));
  EXPECT_TRUE(fits_in(big_png + pixels + slack, [&] {
    DataSplits s = open_dataset("images:" + images.string(), "", two, parse_data_options("val=0.2"));
    std::vector<int64_t> all(static_cast<size_t>(s.train->size()));
    std::iota(all.begin(), all.end(), 0);
    for (int64_t i : all) s.train->inputs(std::span<const int64_t>(&i, 1));
  })) << "images";
  // safetensors: returns the model's tensors; holds the header beyond them.
  const Model wide = build_model(zoo_spec("mlp", {{"hidden", 2048}}));
  const std::string w = (d.path / "w.safetensors").string();
  uint64_t weights = 0;
  {
    ParameterStore p = ParameterStore::create(wide, 0, wide.size() - 1, 1, Device::cpu());
    const NamedTensors named = p.named_tensors();
    for (const auto& [n, t] : named) weights += t.nbytes();
    save_safetensors(w, named);
  }
  const uint64_t header = fs::file_size(w) - weights;
  EXPECT_TRUE(fits_in(weights + header + slack, [&] { load_named_weights(wide, {w}); }))
      << "safetensors";
}

}  // namespace
}  // namespace pd::fuzz
