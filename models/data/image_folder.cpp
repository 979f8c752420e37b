// images:DIR - a folder of class subfolders of JPEG/PNG files, decoded on
// each fetch (by the loader threads when there are some).
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <jpeglib.h>
#include <png.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/rng.h"
#include "core/text.h"
#include "models/data/data_file.h"
#include "models/data/readers.h"

namespace pd::data {

namespace {

namespace fs = std::filesystem;

// RNG stream of the training crops: (seed, kAugmentStream, epoch), block =
// sample index; distinct from the shuffle's (seed, 0x5348, epoch).
constexpr uint32_t kAugmentStream = 0x4147u;  // "AG"

// A corrupt header must not make us allocate gigabytes: 256 Mpixel is
// more than any photograph a training set holds.
constexpr uint64_t kMaxPixels = uint64_t(1) << 28;

struct Pixels {  // 8-bit, rows of w * c interleaved channels
  int64_t h = 0, w = 0;
  std::vector<uint8_t> px;
};

// The largest image file read: far above any photograph's (a 256 Mpixel
// PNG of noise is about 768 MB), far below a sparse or runaway file's.
constexpr uint64_t kMaxImageBytes = uint64_t{1} << 30;

// An image file, refused (naming it) unless a regular file of at most
// kMaxImageBytes.
DataFile open_image(const fs::path& p) {
  DataFile f(p.string(), "image");
  if (f.size() > kMaxImageBytes)
    throw f.error(cat("is ", bytes_text(double(f.size())), "; image files of at most ",
                      bytes_text(double(kMaxImageBytes)), " are read"));
  return f;
}

std::string read_bytes(const fs::path& p) {
  const DataFile f = open_image(p);
  return f.read(0, f.size());
}

struct JpegFailure {
  jpeg_error_mgr mgr;
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

[[noreturn]] void jpeg_fail(j_common_ptr c) {
  auto* f = reinterpret_cast<JpegFailure*>(c->err);
  (*c->err->format_message)(c, f->message);
  std::longjmp(f->jump, 1);
}
// libjpeg only warns about a truncated or corrupt stream and pads it with
// grey; training on the padding would hide a broken file, so a warning fails.
void jpeg_message(j_common_ptr c, int level) {
  if (level < 0) jpeg_fail(c);
}

Pixels decode_jpeg(const std::string& bytes, int channels, const fs::path& path) {
  jpeg_decompress_struct info;
  JpegFailure failure;
  info.err = jpeg_std_error(&failure.mgr);
  failure.mgr.error_exit = jpeg_fail;
  failure.mgr.emit_message = jpeg_message;
  Pixels out;
  if (setjmp(failure.jump)) {
    jpeg_destroy_decompress(&info);
    throw UserError(cat("image ", path.string(), " is not a readable JPEG: ", failure.message));
  }
  jpeg_create_decompress(&info);
  jpeg_mem_src(&info, reinterpret_cast<const unsigned char*>(bytes.data()), static_cast<unsigned long>(bytes.size()));
  jpeg_read_header(&info, TRUE);
  if (uint64_t{info.image_width} * info.image_height > kMaxPixels) {
    jpeg_destroy_decompress(&info);
    throw UserError(cat("image ", path.string(), " is ", info.image_width, "x", info.image_height,
                        ": larger than the ", kMaxPixels, " pixels read"));
  }
  info.out_color_space = channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_start_decompress(&info);
  out.h = info.output_height;
  out.w = info.output_width;
  const size_t row = static_cast<size_t>(out.w) * static_cast<size_t>(channels);
  out.px.resize(row * static_cast<size_t>(out.h));
  while (info.output_scanline < info.output_height) {
    JSAMPROW r = out.px.data() + row * info.output_scanline;
    jpeg_read_scanlines(&info, &r, 1);
  }
  jpeg_finish_decompress(&info);
  jpeg_destroy_decompress(&info);
  return out;
}

Pixels decode_png(const std::string& bytes, int channels, const fs::path& path) {
  png_image image;
  std::memset(&image, 0, sizeof image);
  image.version = PNG_IMAGE_VERSION;
  auto fail = [&] {
    const std::string why = image.message;
    png_image_free(&image);
    return UserError(cat("image ", path.string(), " is not a readable PNG: ", why));
  };
  if (!png_image_begin_read_from_memory(&image, bytes.data(), bytes.size())) throw fail();
  if (uint64_t{image.width} * image.height > kMaxPixels) {
    png_image_free(&image);
    throw UserError(cat("image ", path.string(), " is ", image.width, "x", image.height, ": larger than the ",
                        kMaxPixels, " pixels read"));
  }
  image.format = channels == 1 ? PNG_FORMAT_GRAY : PNG_FORMAT_RGB;
  Pixels out;
  out.h = image.height;
  out.w = image.width;
  out.px.resize(PNG_IMAGE_SIZE(image));
  if (!png_image_finish_read(&image, nullptr, out.px.data(), 0, nullptr)) throw fail();
  return out;
}

enum class ImageFormat { Jpeg, Png };

ImageFormat format_of(const std::string& head, const fs::path& path) {
  if (head.size() >= 3 && static_cast<unsigned char>(head[0]) == 0xFF && static_cast<unsigned char>(head[1]) == 0xD8 &&
      static_cast<unsigned char>(head[2]) == 0xFF)
    return ImageFormat::Jpeg;
  if (head.size() >= 8 && std::memcmp(head.data(), "\x89PNG\r\n\x1a\n", 8) == 0) return ImageFormat::Png;
  throw UserError(cat("image ", path.string(), " is neither a JPEG nor a PNG (its first bytes are not a JPEG or "
                      "PNG signature)"));
}

bool image_extension(const fs::path& p) {
  std::string e = p.extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e == ".jpg" || e == ".jpeg" || e == ".png";
}

struct ImageFile {
  fs::path path;
  int32_t label = 0;
};

// Where a crop of the resized image starts, and whether it is mirrored.
struct Crop {
  int64_t y0 = 0, x0 = 0;
  bool flip = false;
};

class ImageFolderDataset final : public Dataset {
 public:
  ImageFolderDataset(std::string name, std::vector<ImageFile> files, int64_t classes, const Model& m,
                     const DataOptions& o)
      : name_(std::move(name)), files_(std::move(files)), classes_(classes), shape_(m.input_shape),
        augment_(o.augment), mean_(o.mean), std_(o.std) {}
  std::string name() const override { return name_; }
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  Shape sample_shape() const override { return shape_; }
  DType input_dtype() const override { return DType::F32; }
  Shape label_shape() const override { return {}; }
  int64_t classes() const override { return classes_; }

  Tensor inputs(std::span<const int64_t> idx) const override { return load(idx, nullptr); }
  Tensor training_inputs(std::span<const int64_t> idx, uint64_t seed, int64_t epoch) const override {
    if (!augment_) return load(idx, nullptr);
    const CounterRng rng(seed, kAugmentStream, static_cast<uint32_t>(epoch));
    return load(idx, &rng);
  }
  Tensor labels(std::span<const int64_t> idx) const override {
    Tensor y = Tensor::empty({static_cast<int64_t>(idx.size())}, DType::I32);
    for (size_t i = 0; i < idx.size(); ++i) y.data<int32_t>()[i] = file(idx[i]).label;
    return y;
  }

 private:
  const ImageFile& file(int64_t i) const {
    PD_CHECK(i >= 0 && i < size(), "sample index ", i, " out of range");
    return files_[static_cast<size_t>(i)];
  }
  Tensor load(std::span<const int64_t> idx, const CounterRng* rng) const {
    const int64_t c = shape_[0], h = shape_[1], w = shape_[2];
    Tensor x = Tensor::empty({static_cast<int64_t>(idx.size()), c, h, w});
    for (size_t i = 0; i < idx.size(); ++i) {
      const ImageFile& f = file(idx[i]);
      const std::string bytes = read_bytes(f.path);
      const Pixels p = format_of(bytes, f.path) == ImageFormat::Jpeg ? decode_jpeg(bytes, static_cast<int>(c), f.path)
                                                                     : decode_png(bytes, static_cast<int>(c), f.path);
      if (p.h < 1 || p.w < 1) throw UserError(cat("image ", f.path.string(), " has no pixels"));
      render(p, rng ? rng->block(static_cast<uint64_t>(idx[i])) : Philox4{}, rng != nullptr,
             x.f32() + static_cast<int64_t>(i) * c * h * w);
    }
    return x;
  }
  // Resizes (shorter side to 8/7 of the output's, bilinear, pixel centres
  // as PIL and torch place them), crops to the output size (random with
  // the draw, else centred), mirrors when drawn, normalises.
  void render(const Pixels& p, const Philox4& draw, bool random, float* out) const {
    const int64_t c = shape_[0], h = shape_[1], w = shape_[2];
    const double scale = 8.0 / 7.0 * std::max(double(h) / double(p.h), double(w) / double(p.w));
    const int64_t rh = std::max(h, static_cast<int64_t>(std::lround(double(p.h) * scale)));
    const int64_t rw = std::max(w, static_cast<int64_t>(std::lround(double(p.w) * scale)));
    Crop crop{(rh - h) / 2, (rw - w) / 2, false};
    if (random) crop = {int64_t(draw.v[0] % uint32_t(rh - h + 1)), int64_t(draw.v[1] % uint32_t(rw - w + 1)),
                        (draw.v[2] & 1u) != 0};
    const double sy = double(p.h) / double(rh), sx = double(p.w) / double(rw);
    for (int64_t i = 0; i < h; ++i) {
      const double fy = std::clamp((double(crop.y0 + i) + 0.5) * sy - 0.5, 0.0, double(p.h - 1));
      const int64_t y0 = static_cast<int64_t>(fy), y1 = std::min(y0 + 1, p.h - 1);
      const float ty = static_cast<float>(fy - double(y0));
      for (int64_t j = 0; j < w; ++j) {
        const int64_t col = crop.x0 + (crop.flip ? w - 1 - j : j);
        const double fx = std::clamp((double(col) + 0.5) * sx - 0.5, 0.0, double(p.w - 1));
        const int64_t x0 = static_cast<int64_t>(fx), x1 = std::min(x0 + 1, p.w - 1);
        const float tx = static_cast<float>(fx - double(x0));
        for (int64_t k = 0; k < c; ++k) {
          auto at = [&](int64_t y, int64_t x) { return float(p.px[static_cast<size_t>((y * p.w + x) * c + k)]); };
          const float top = at(y0, x0) + tx * (at(y0, x1) - at(y0, x0));
          const float bottom = at(y1, x0) + tx * (at(y1, x1) - at(y1, x0));
          const float v = (top + ty * (bottom - top)) / 255.0f;
          out[(k * h + i) * w + j] = (v - mean_[static_cast<size_t>(k)]) / std_[static_cast<size_t>(k)];
        }
      }
    }
  }

  std::string name_;
  std::vector<ImageFile> files_;
  int64_t classes_;
  Shape shape_;
  bool augment_;
  std::vector<float> mean_, std_;
};

// The entries of `dir` but hidden ones, sorted, each refused (naming it)
// when it cannot be looked at: a symlink loop, a dangling link, a folder
// that cannot be listed.
std::vector<fs::directory_entry> sorted_entries(const fs::path& dir, const fs::path& root) {
  std::error_code ec;
  std::vector<fs::directory_entry> out;
  fs::directory_iterator it(dir, ec);
  for (; !ec && it != fs::directory_iterator(); it.increment(ec)) {
    if (it->path().filename().string().starts_with(".")) continue;
    out.push_back(*it);
  }
  if (ec) throw UserError(cat("--data images:", root.string(), ": folder ", dir.string(), " cannot be listed: ",
                              ec.message()));
  std::sort(out.begin(), out.end());
  return out;
}

// What an entry is, following symlinks; a UserError naming a link that
// leads nowhere or in a loop.
fs::file_type entry_type(const fs::directory_entry& e, const fs::path& root) {
  std::error_code ec;
  const fs::file_status st = fs::status(e.path(), ec);
  if (!ec && st.type() != fs::file_type::not_found) return st.type();
  std::error_code link_ec;
  const bool link = fs::is_symlink(fs::symlink_status(e.path(), link_ec));
  throw UserError(cat("--data images:", root.string(), ": ", e.path().string(), " cannot be opened: ",
                      link && st.type() == fs::file_type::not_found ? "a symlink to nothing" : ec.message()));
}

// Class folders of `root` and their image files; checks each file's
// signature. Every entry of a class folder must be an image file: a
// folder, FIFO, socket or device named x.png is refused like notes.txt.
std::vector<std::vector<fs::path>> scan_classes(const fs::path& root, std::vector<std::string>& class_names) {
  std::vector<fs::path> folders;
  for (const auto& e : sorted_entries(root, root))
    if (entry_type(e, root) == fs::file_type::directory) folders.push_back(e.path());
  if (folders.empty())
    throw UserError(cat("--data images:", root.string(), ": the folder has no class subfolders (want one folder of "
                        ".jpg/.jpeg/.png files per class)"));
  std::vector<std::vector<fs::path>> files;
  for (const fs::path& f : folders) {
    class_names.push_back(f.filename().string());
    files.emplace_back();
    for (const auto& e : sorted_entries(f, root)) {
      const fs::path& p = e.path();
      if (!image_extension(p))
        throw UserError(cat("--data images:", root.string(), ": ", p.string(), " is not a .jpg, .jpeg or .png file "
                            "(move other files out of the class folders)"));
      if (entry_type(e, root) != fs::file_type::regular)
        throw UserError(cat("--data images:", root.string(), ": ", p.string(), " is not a regular file (a folder, "
                            "device, FIFO or socket); a class folder holds image files only"));
      const DataFile in = open_image(p);
      format_of(in.read(0, std::min<uint64_t>(in.size(), 8)), p);
      files.back().push_back(p);
    }
    if (files.back().empty())
      throw UserError(cat("--data images:", root.string(), ": class folder ", f.string(), " holds no images"));
  }
  return files;
}

std::vector<float> per_channel(const std::vector<float>& given, int64_t channels, float gray, const float* rgb,
                               const char* what) {
  if (given.empty()) return channels == 1 ? std::vector<float>{gray} : std::vector<float>(rgb, rgb + 3);
  if (static_cast<int64_t>(given.size()) == channels) return given;
  if (given.size() == 1) return std::vector<float>(static_cast<size_t>(channels), given[0]);
  throw UserError(cat("--data-options ", what, " has ", given.size(), " values but the model's images have ",
                      channels, " channels"));
}

}  // namespace

DataSplits open_image_folder(const std::string& dir, const Model& m, const DataOptions& given) {
  if (dir.empty()) throw UserError("--data images:DIR needs a folder (images:path/to/folder)");
  const fs::path root(dir);
  std::error_code ec;
  if (!fs::is_directory(root, ec))
    throw UserError(cat("--data images:", dir, ": no such folder", ec ? cat(" (", ec.message(), ")") : ""));
  if (m.input_dtype != DType::F32 || m.input_shape.size() != 3 || (m.input_shape[0] != 1 && m.input_shape[0] != 3))
    throw UserError(cat("--data images:", dir, " gives 1- or 3-channel images but model ", m.name, " takes ",
                        shape_str(m.input_shape), " ", dtype_name(m.input_dtype)));
  if (m.task != Task::Classification)
    throw UserError(cat("--data images: trains classifiers; ", m.name, " is a ", task_name(m.task)));
  DataOptions o = given;
  const int64_t channels = m.input_shape[0];
  static constexpr float kImagenetMean[3] = {0.485f, 0.456f, 0.406f}, kImagenetStd[3] = {0.229f, 0.224f, 0.225f};
  o.mean = per_channel(o.mean, channels, 0.449f, kImagenetMean, "mean");
  o.std = per_channel(o.std, channels, 0.226f, kImagenetStd, "std");
  for (float s : o.std)
    if (!(s > 0)) throw UserError(cat("--data-options std must be positive, got ", s));
  // Pixels lie in [0, 1]; the normalisation is monotone, so the ends bound it.
  for (size_t k = 0; k < o.mean.size(); ++k)
    for (const float v : {0.0f, 1.0f})
      if (const float x = (v - o.mean[k]) / o.std[k]; !std::isfinite(x))
        throw UserError(cat("--data-options mean=", o.mean[k], " and std=", o.std[k], " make a pixel of ", v, " into ",
                            x, ": the inputs must be finite (usual: mean in [0, 1], std near 0.2)"));

  auto build = [&](const std::vector<std::vector<fs::path>>& classes, bool (*keep)(int64_t, int64_t), int64_t stride) {
    std::vector<ImageFile> out;
    for (size_t c = 0; c < classes.size(); ++c)
      for (size_t j = 0; j < classes[c].size(); ++j)
        if (keep(static_cast<int64_t>(j), stride)) out.push_back({classes[c][j], static_cast<int32_t>(c)});
    return out;
  };
  auto all = [](int64_t, int64_t) { return true; };
  std::vector<std::string> names;
  DataSplits s;
  if (fs::is_directory(root / "train", ec)) {
    const fs::path val_dir = fs::is_directory(root / "val", ec) ? root / "val" : root / "test";
    if (!fs::is_directory(val_dir, ec))
      throw UserError(cat("--data images:", dir, " has train/ but neither val/ nor test/ beside it"));
    const auto train = scan_classes(root / "train", names);
    std::vector<std::string> val_names;
    const auto val = scan_classes(val_dir, val_names);
    if (val_names != names)
      throw UserError(cat("--data images:", dir, ": ", val_dir.string(), " has other class folders than train/ (",
                          val_names.size(), " against ", names.size(), ")"));
    s.train = std::make_unique<ImageFolderDataset>("images/train", build(train, all, 1), names.size(), m, o);
    s.test = std::make_unique<ImageFolderDataset>("images/val", build(val, all, 1), names.size(), m, o);
  } else {
    const int64_t stride = held_out_stride(o.val);
    const auto classes = scan_classes(root, names);
    auto train_file = [](int64_t j, int64_t k) { return !is_held_out(j, k); };
    s.train = std::make_unique<ImageFolderDataset>("images/train", build(classes, train_file, stride), names.size(), m,
                                                   o);
    s.test = std::make_unique<ImageFolderDataset>("images/test", build(classes, is_held_out, stride), names.size(), m,
                                                  o);
    if (s.test->size() == 0)
      throw UserError(cat("--data images:", dir, ": no class folder has ", stride, " images, so val=", o.val,
                          " holds none out (add images, raise val, or give train/ and val/ folders)"));
  }
  if (s.train->size() == 0) throw UserError(cat("--data images:", dir, ": no training images"));
  return s;
}

}  // namespace pd::data
