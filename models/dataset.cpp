// Fashion-MNIST, CIFAR-10, character-level text and synthetic datasets.
#include "models/dataset.h"

#include <algorithm>
#include <zlib.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "models/data/readers.h"

namespace pd {

namespace {

namespace fs = std::filesystem;

// Samples held in memory as one tensor of rows, labels as another.
class InMemoryDataset final : public Dataset {
 public:
  InMemoryDataset(std::string name, Tensor inputs, Tensor labels, int64_t classes)
      : name_(std::move(name)), inputs_(std::move(inputs)), labels_(std::move(labels)), classes_(classes) {}
  std::string name() const override { return name_; }
  int64_t size() const override { return inputs_.dim(0); }
  Shape sample_shape() const override { return Shape(inputs_.shape().begin() + 1, inputs_.shape().end()); }
  DType input_dtype() const override { return inputs_.dtype(); }
  Shape label_shape() const override { return Shape(labels_.shape().begin() + 1, labels_.shape().end()); }
  int64_t classes() const override { return classes_; }
  Tensor inputs(std::span<const int64_t> idx) const override { return gather(inputs_, idx); }
  Tensor labels(std::span<const int64_t> idx) const override { return gather(labels_, idx); }

 private:
  static Tensor gather(const Tensor& src, std::span<const int64_t> idx) {
    Shape s = src.shape();
    s[0] = static_cast<int64_t>(idx.size());
    Tensor out = Tensor::empty(s, src.dtype());
    const size_t row = src.nbytes() / static_cast<size_t>(src.dim(0));
    const char* from = static_cast<const char*>(src.raw());
    char* to = static_cast<char*>(out.raw());
    for (size_t i = 0; i < idx.size(); ++i) {
      PD_CHECK(idx[i] >= 0 && idx[i] < src.dim(0), "sample index ", idx[i], " out of range");
      std::memcpy(to + i * row, from + static_cast<size_t>(idx[i]) * row, row);
    }
    return out;
  }
  std::string name_;
  Tensor inputs_, labels_;
  int64_t classes_;
};

// ---- Fashion-MNIST (idx format, gzip-compressed) ----

std::string read_gzip(const fs::path& path) {
  if (!fs::exists(path))
    throw UserError(cat("dataset file ", path.string(), " not found (install dataset-fashion-mnist, "
                        "or point --data-dir at a folder with the idx .gz files)"));
  gzFile f = gzopen(path.c_str(), "rb");
  if (!f) throw UserError(cat("cannot open ", path.string()));
  std::string out;
  char buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
  int err = 0;
  const char* msg = gzerror(f, &err);
  std::string why = msg ? msg : "";
  gzclose(f);
  if (n < 0 || (err != Z_OK && err != Z_STREAM_END))
    throw UserError(cat(path.string(), " is not a readable gzip file: ", why));
  return out;
}

uint32_t be32(const std::string& s, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + at);
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | p[3];
}

// Fashion-MNIST's mean and standard deviation of the training pixels.
constexpr float kFashionMean = 0.2860f, kFashionStd = 0.3530f;

std::unique_ptr<Dataset> fashion_split(const fs::path& dir, const std::string& prefix, const std::string& name) {
  const fs::path img_path = dir / (prefix + "-images-idx3-ubyte.gz");
  const fs::path lbl_path = dir / (prefix + "-labels-idx1-ubyte.gz");
  std::string img = read_gzip(img_path), lbl = read_gzip(lbl_path);
  if (img.size() < 16 || be32(img, 0) != 0x803)
    throw UserError(cat(img_path.string(), " is not an idx3 image file"));
  if (lbl.size() < 8 || be32(lbl, 0) != 0x801)
    throw UserError(cat(lbl_path.string(), " is not an idx1 label file"));
  const int64_t n = be32(img, 4), h = be32(img, 8), w = be32(img, 12);
  if (static_cast<int64_t>(be32(lbl, 4)) != n || img.size() != 16 + static_cast<size_t>(n * h * w) ||
      lbl.size() != 8 + static_cast<size_t>(n))
    throw UserError(cat(img_path.string(), " and ", lbl_path.string(), " are truncated or disagree on the count"));
  Tensor x = Tensor::empty({n, 1, h, w});
  float* px = x.f32();
  const auto* src = reinterpret_cast<const unsigned char*>(img.data() + 16);
  for (int64_t i = 0; i < n * h * w; ++i) px[i] = (src[i] / 255.0f - kFashionMean) / kFashionStd;
  Tensor y = Tensor::empty({n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) {
    unsigned char c = static_cast<unsigned char>(lbl[8 + static_cast<size_t>(i)]);
    if (c > 9) throw UserError(cat(lbl_path.string(), ": label ", int{c}, " out of range 0..9"));
    y.data<int32_t>()[i] = c;
  }
  return std::make_unique<InMemoryDataset>(name, std::move(x), std::move(y), 10);
}

// ---- CIFAR-10 (binary version: 1 label byte + 3072 pixel bytes per record) ----

constexpr float kCifarMean[3] = {0.4914f, 0.4822f, 0.4465f};
constexpr float kCifarStd[3] = {0.2470f, 0.2435f, 0.2616f};

std::unique_ptr<Dataset> cifar_split(const fs::path& dir, const std::vector<std::string>& files,
                                     const std::string& name) {
  constexpr size_t kRecord = 3073;
  std::string all;
  for (const auto& f : files) {
    const fs::path p = dir / f;
    std::ifstream in(p, std::ios::binary);
    if (!in)
      throw UserError(cat("CIFAR-10 file ", p.string(), " not found: --data-dir must hold the binary version "
                          "(data_batch_1.bin ... data_batch_5.bin, test_batch.bin)"));
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.empty() || bytes.size() % kRecord != 0)
      throw UserError(cat(p.string(), " is not a CIFAR-10 binary batch (size ", bytes.size(),
                          " is not a multiple of 3073)"));
    all += bytes;
  }
  const int64_t n = static_cast<int64_t>(all.size() / kRecord);
  Tensor x = Tensor::empty({n, 3, 32, 32});
  Tensor y = Tensor::empty({n}, DType::I32);
  for (int64_t i = 0; i < n; ++i) {
    const auto* rec = reinterpret_cast<const unsigned char*>(all.data() + static_cast<size_t>(i) * kRecord);
    if (rec[0] > 9) throw UserError(cat("CIFAR-10 record ", i, " has label ", int{rec[0]}, " (not 0..9)"));
    y.data<int32_t>()[i] = rec[0];
    float* px = x.f32() + i * 3072;
    for (int c = 0; c < 3; ++c)
      for (int k = 0; k < 1024; ++k) px[c * 1024 + k] = (rec[1 + c * 1024 + k] / 255.0f - kCifarMean[c]) / kCifarStd[c];
  }
  return std::make_unique<InMemoryDataset>(name, std::move(x), std::move(y), 10);
}

// ---- Character-level text: byte tokens, next-byte targets ----

class TextDataset final : public Dataset {
 public:
  TextDataset(std::string name, std::string text, int64_t context)
      : name_(std::move(name)), text_(std::move(text)), t_(context) {}
  std::string name() const override { return name_; }
  // Non-overlapping windows; the target window is the input shifted by one.
  int64_t size() const override { return (static_cast<int64_t>(text_.size()) - 1) / t_; }
  Shape sample_shape() const override { return {t_}; }
  DType input_dtype() const override { return DType::I32; }
  Shape label_shape() const override { return {t_}; }
  int64_t classes() const override { return 256; }
  Tensor inputs(std::span<const int64_t> idx) const override { return window(idx, 0); }
  Tensor labels(std::span<const int64_t> idx) const override { return window(idx, 1); }

 private:
  Tensor window(std::span<const int64_t> idx, int64_t shift) const {
    return data::token_windows(reinterpret_cast<const unsigned char*>(text_.data()), size(), t_, idx, shift);
  }
  std::string name_, text_;
  int64_t t_;
};

fs::path text_file(const std::string& dir) {
  if (dir.empty()) throw UserError("--data text needs --data-dir FILE (any text file)");
  fs::path p(dir);
  if (fs::is_regular_file(p)) return p;
  if (fs::is_directory(p)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(p))
      if (e.is_regular_file()) files.push_back(e.path());
    if (files.size() == 1) return files[0];
    throw UserError(cat("--data-dir ", dir, " holds ", files.size(), " files; name the text file itself"));
  }
  throw UserError(cat("text file ", dir, " not found"));
}

DataSplits open_text(const std::string& dir, const Model& model) {
  if (model.task != Task::LanguageModel)
    throw UserError(cat("--data text trains language models; ", model.name, " is a classifier"));
  if (model.classes < 256)
    throw UserError(cat("--data text uses byte tokens (256); ", model.name, "'s vocabulary is ", model.classes));
  const fs::path path = text_file(dir);
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int64_t t = model.input_shape[0];
  const size_t cut = text.size() * 9 / 10;
  if (static_cast<int64_t>(text.size() - cut) < t + 1)
    throw UserError(cat(path.string(), " has ", text.size(), " bytes: too short for a test split of windows of ",
                        t + 1, " bytes (need at least ", 10 * (t + 1), ")"));
  std::string train = text.substr(0, cut), test = text.substr(cut);
  return {std::make_unique<TextDataset>("text/train", std::move(train), t),
          std::make_unique<TextDataset>("text/test", std::move(test), t)};
}

// ---- Synthetic: learnable, shaped for the model ----

constexpr uint64_t kSyntheticDataKey = 0x5EED5EEDull;
//
// A class's prototype: a standard normal per value from a fixed key.
void prototype(int64_t cls, float* out, int64_t per) {
  const CounterRng proto(kSyntheticDataKey, 1, static_cast<uint32_t>(cls));
  for (int64_t k = 0; k < per; ++k) out[k] = proto.normal(static_cast<uint64_t>(k));
}

// Every class's prototype, each computed when first asked for (by whichever
// thread asks first) and shared by the training and test splits. Null from
// of() past the memory cap: the caller computes it itself.
class Prototypes {
 public:
  Prototypes(int64_t classes, int64_t per)
      : per_(per), cached_(classes * per <= kMaxValues), once_(static_cast<size_t>(cached_ ? classes : 0)) {
    if (cached_) values_.reset(new float[static_cast<size_t>(classes * per)]);
  }
  const float* of(int64_t cls) const {
    if (!cached_) return nullptr;
    float* p = values_.get() + cls * per_;
    std::call_once(once_[static_cast<size_t>(cls)], [&] { prototype(cls, p, per_); });
    return p;
  }

 private:
  // 1 GiB: resnet50's 1000 classes of 3x224x224 (602 MB) fit.
  static constexpr int64_t kMaxValues = int64_t(1) << 28;
  int64_t per_;
  bool cached_;
  std::unique_ptr<float[]> values_;
  mutable std::vector<std::once_flag> once_;
};

// Classification: sample i has class (i mod classes) and input = the class's
// fixed random prototype (standard normal) + unit-variance uniform noise;
// language model: token sequences that follow t' = (5t + 3) mod V from a
// random start. Contents depend only on a fixed data key and the sample
// index. Fetching must cost next to nothing - it is the first stage's work
// in a pipelined run, which no profile counts: prototypes are computed once
// (up to 1 GiB of them, each when first used; computing one per sample cost
// resnet50 at 224x224 6 ms a sample) and the noise is one uniform draw per value, four
// per Philox block (two Box-Muller normals per value took 27 ms of a 64x64
// resnet18 stage's 170 ms per minibatch of 32; a block per value, 3.0 ms;
// a block per four, 0.7 ms).
class SyntheticDataset final : public Dataset {
 public:
  SyntheticDataset(std::string name, const Model& m, int64_t n, uint32_t split,
                   std::shared_ptr<const Prototypes> prototypes)
      : name_(std::move(name)), shape_(m.input_shape), dtype_(m.input_dtype), labels_(m.label_shape()),
        classes_(m.classes), n_(n), split_(split), prototypes_(std::move(prototypes)) {}
  std::string name() const override { return name_; }
  int64_t size() const override { return n_; }
  Shape sample_shape() const override { return shape_; }
  DType input_dtype() const override { return dtype_; }
  Shape label_shape() const override { return labels_; }
  int64_t classes() const override { return classes_; }

  Tensor inputs(std::span<const int64_t> idx) const override {
    Shape s = shape_;
    s.insert(s.begin(), static_cast<int64_t>(idx.size()));
    Tensor out = Tensor::empty(s, dtype_);
    const int64_t per = shape_numel(shape_);
    for (size_t i = 0; i < idx.size(); ++i) {
      if (dtype_ == DType::I32) {
        sequence(idx[i], out.data<int32_t>() + static_cast<int64_t>(i) * per, per, 0);
      } else {
        const int64_t cls = idx[i] % classes_;
        float* p = out.f32() + static_cast<int64_t>(i) * per;
        if (const float* proto = prototypes_ ? prototypes_->of(cls) : nullptr) std::copy_n(proto, per, p);
        else prototype(cls, p, per);
        const CounterRng noise(kDataKey, 2 + split_, static_cast<uint32_t>(idx[i]));
        constexpr float kWidth = 3.4641016f;  // uniform on [-sqrt 3, sqrt 3): variance 1
        // Element k is word k % 4 of Philox block k / 4: one block per 4 values.
        int64_t k = 0;
        for (; k + 4 <= per; k += 4) {
          const Philox4 words = noise.block(static_cast<uint64_t>(k / 4));
          for (int j = 0; j < 4; ++j) p[k + j] += kWidth * (uniform01(words.v[j]) - 0.5f);
        }
        for (; k < per; ++k) p[k] += kWidth * (noise.uniform(static_cast<uint64_t>(k)) - 0.5f);
      }
    }
    return out;
  }

  Tensor labels(std::span<const int64_t> idx) const override {
    Shape s = labels_;
    s.insert(s.begin(), static_cast<int64_t>(idx.size()));
    Tensor out = Tensor::empty(s, DType::I32);
    const int64_t per = shape_numel(labels_);
    for (size_t i = 0; i < idx.size(); ++i) {
      int32_t* p = out.data<int32_t>() + static_cast<int64_t>(i) * per;
      if (dtype_ == DType::I32) sequence(idx[i], p, per, 1);
      else p[0] = static_cast<int32_t>(idx[i] % classes_);
    }
    return out;
  }

 private:
  static constexpr uint64_t kDataKey = kSyntheticDataKey;
  void sequence(int64_t i, int32_t* out, int64_t len, int64_t shift) const {
    CounterRng start(kDataKey, 2 + split_, static_cast<uint32_t>(i));
    int64_t t = start.bits(0) % classes_;
    for (int64_t k = 0; k < shift; ++k) t = (5 * t + 3) % classes_;
    for (int64_t k = 0; k < len; ++k) {
      out[k] = static_cast<int32_t>(t);
      t = (5 * t + 3) % classes_;
    }
  }
  std::string name_;
  Shape shape_;
  DType dtype_;
  Shape labels_;
  int64_t classes_, n_;
  uint32_t split_;
  std::shared_ptr<const Prototypes> prototypes_;  // null for token models
};

void check_fits(const Dataset& d, const Model& m) {
  if (d.sample_shape() != m.input_shape || d.input_dtype() != m.input_dtype)
    throw UserError(cat("dataset ", d.name(), " has samples ", shape_str(d.sample_shape()), " ",
                        dtype_name(d.input_dtype()), " but model ", m.name, " takes ", shape_str(m.input_shape), " ",
                        dtype_name(m.input_dtype), " (use a model built for this data, or model options such as "
                        "image_size)"));
  if (d.label_shape() != m.label_shape() ||
      (m.task == Task::Classification ? d.classes() != m.classes : d.classes() > m.classes))
    throw UserError(cat("dataset ", d.name(), " has ", d.classes(), " classes but model ", m.name, " predicts ",
                        m.classes, " (", task_name(m.task), ")"));
}

}  // namespace

std::vector<std::string> dataset_names() {
  return {"fashion-mnist", "cifar10", "text", "synthetic", "images:DIR", "npy:X.npy,Y.npy", "npy:FILE.npz",
          "tokens:FILE.bin"};
}

namespace data {
std::unique_ptr<Dataset> in_memory_dataset(std::string name, Tensor inputs, Tensor labels, int64_t classes) {
  return std::make_unique<InMemoryDataset>(std::move(name), std::move(inputs), std::move(labels), classes);
}

int64_t held_out_stride(double val) {
  if (!(val > 0 && val <= 0.5))
    throw UserError(cat("--data-options val must be in (0, 0.5] (the held-out share), got ", val));
  return std::max<int64_t>(2, std::llround(1.0 / val));
}
}  // namespace data

void DataOptions::refuse_image_options(const std::string& reader) const {
  // augment=0 asks for what these readers do anyway.
  for (const std::string& key : given)
    if (key == "mean" || key == "std" || (key == "augment" && augment))
      throw UserError(cat("--data-options ", key, " applies to images: folders; --data ", reader,
                          " reads its samples as they are (only val= applies)"));
}

DataOptions parse_data_options(const std::string& text) {
  DataOptions o;
  std::stringstream items(text);
  std::string item;
  // Parsed as a double, then narrowed: stof calls 1e-38 (a float, though
  // subnormal) out of range.
  auto number = [](const std::string& key, const std::string& v) {
    if (v.empty()) throw UserError(cat("--data-options ", key, ": a value is empty (e.g. mean=0.5/0.5/0.5)"));
    char* end = nullptr;
    errno = 0;
    const double d = std::strtod(v.c_str(), &end);
    if (end != v.c_str() + v.size() || std::isspace(static_cast<unsigned char>(v[0])))
      throw UserError(cat("--data-options ", key, ": '", v, "' is not a number"));
    if (!std::isfinite(d) || std::fabs(d) > std::numeric_limits<float>::max())
      throw UserError(cat("--data-options ", key, ": ", v, " is beyond the float range (|x| <= 3.4e38)"));
    if (d != 0 && std::fabs(d) < std::numeric_limits<float>::denorm_min())
      throw UserError(cat("--data-options ", key, ": ", v, " is below the smallest float (1.4e-45)"));
    return static_cast<float>(d);
  };
  while (std::getline(items, item, ',')) {
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos)
      throw UserError(cat("--data-options item '", item, "' is not KEY=VALUE (e.g. mean=0.5/0.5/0.5,val=0.2)"));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (std::find(o.given.begin(), o.given.end(), key) != o.given.end())
      throw UserError(cat("--data-options: key '", key, "' is given twice (give per-channel values once, as "
                          "mean=R/G/B)"));
    o.given.push_back(key);
    if (key == "mean" || key == "std") {
      std::vector<float>& out = key == "mean" ? o.mean : o.std;
      for (size_t at = 0;;) {
        const size_t slash = value.find('/', at);
        out.push_back(number(key, value.substr(at, slash == std::string::npos ? std::string::npos : slash - at)));
        if (slash == std::string::npos) break;
        at = slash + 1;
      }
    } else if (key == "val") {
      o.val = number(key, value);
    } else if (key == "augment") {
      if (value != "0" && value != "1") throw UserError(cat("--data-options augment must be 0 or 1, got '", value, "'"));
      o.augment = value == "1";
    } else {
      throw UserError(cat("--data-options: unknown key '", key, "' (mean, std, val, augment)"));
    }
  }
  return o;
}

std::unique_ptr<Dataset> load_into_memory(const Dataset& from, int64_t n) {
  PD_CHECK(n >= 1 && n <= from.size(), "cannot load ", n, " of ", from.name(), "'s ", from.size(), " samples");
  std::vector<int64_t> idx(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = i;
  return std::make_unique<InMemoryDataset>(from.name() + " (in memory)", from.inputs(idx), from.labels(idx),
                                           from.classes());
}

DataSplits open_dataset(const std::string& name, const std::string& dir, const Model& model,
                        const DataOptions& options) {
  DataSplits s;
  const size_t colon = name.find(':');
  const std::string kind = name.substr(0, colon), where = colon == std::string::npos ? "" : name.substr(colon + 1);
  const DataOptions defaults;
  const bool options_given = !options.mean.empty() || !options.std.empty() || options.val != defaults.val ||
                             options.augment != defaults.augment;
  if (options_given && kind != "images" && kind != "npy" && kind != "tokens")
    throw UserError(cat("--data-options apply to images:, npy: and tokens: data, not --data ", name));
  if (kind == "images" || kind == "npy" || kind == "tokens") {
    if (!dir.empty()) throw UserError(cat("--data ", kind, ":... names its files itself; drop --data-dir"));
    if (colon == std::string::npos) throw UserError(cat("--data ", kind, " needs its files: --data ", kind, ":PATH"));
    if (kind == "images") s = data::open_image_folder(where, model, options);
    else if (kind == "npy") s = data::open_npy(where, model, options);
    else s = data::open_tokens(where, model, options);
  } else if (name == "fashion-mnist") {
    const fs::path d = dir.empty() ? fs::path("/usr/share/datasets/fashion-mnist") : fs::path(dir);
    s.train = fashion_split(d, "train", "fashion-mnist/train");
    s.test = fashion_split(d, "t10k", "fashion-mnist/test");
  } else if (name == "cifar10") {
    if (dir.empty()) throw UserError("--data cifar10 needs --data-dir DIR holding the CIFAR-10 binary batches");
    s.train = cifar_split(dir, {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin", "data_batch_4.bin",
                                "data_batch_5.bin"}, "cifar10/train");
    s.test = cifar_split(dir, {"test_batch.bin"}, "cifar10/test");
  } else if (name == "text") {
    s = open_text(dir, model);
  } else if (name == "synthetic") {
    if (!dir.empty()) throw UserError("--data synthetic takes no --data-dir");
    std::shared_ptr<const Prototypes> protos;
    if (model.input_dtype == DType::F32)
      protos = std::make_shared<const Prototypes>(model.classes, shape_numel(model.input_shape));
    s.train = std::make_unique<SyntheticDataset>("synthetic/train", model, 4096, 0, protos);
    s.test = std::make_unique<SyntheticDataset>("synthetic/test", model, 1024, 1, protos);
  } else {
    throw UserError(cat("unknown dataset '", name, "': use fashion-mnist, cifar10, text, synthetic, images:DIR, "
                        "npy:X.npy,Y.npy, npy:FILE.npz or tokens:FILE.bin"));
  }
  check_fits(*s.train, model);
  return s;
}

}  // namespace pd
