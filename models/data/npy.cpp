// npy:X.npy,Y.npy and npy:FILE.npz - NumPy arrays of samples and labels.
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>

#include "core/error.h"
#include "models/data/readers.h"

namespace pd::data {

namespace {

namespace fs = std::filesystem;

// One array: its element type as NumPy spells it ("<f4"), shape and bytes.
struct NpyArray {
  std::string source;  // "x.npy" or "data.npz:x_train" (for messages)
  std::string descr;
  Shape shape;
  std::string bytes;
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
};

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw UserError(cat("--data npy: ", p.string(), " not found"));
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

uint32_t le32(const std::string& s, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + at);
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
uint16_t le16(const std::string& s, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data() + at);
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint64_t le64(const std::string& s, size_t at) { return uint64_t{le32(s, at)} | (uint64_t{le32(s, at + 4)} << 32); }

size_t element_size(const std::string& descr) {
  static const std::map<std::string, size_t> sizes = {{"<f4", 4}, {"<f8", 8}, {"|u1", 1}, {"<u1", 1}, {"|i1", 1},
                                                      {"<i2", 2}, {"<u2", 2}, {"<i4", 4}, {"<u4", 4}, {"<i8", 8},
                                                      {"<u8", 8}};
  auto it = sizes.find(descr);
  return it == sizes.end() ? 0 : it->second;
}

// The .npy format: magic, version, header length, a Python dict literal.
NpyArray parse_npy(const std::string& b, const std::string& source) {
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0)
    throw UserError(cat("--data npy: ", source, " is not a .npy file (no \\x93NUMPY magic)"));
  const int major = static_cast<unsigned char>(b[6]);
  size_t header_len = 0, at = 0;
  if (major == 1) {
    header_len = le16(b, 8);
    at = 10;
  } else if (major == 2 || major == 3) {
    if (b.size() < 12) throw UserError(cat("--data npy: ", source, " is truncated in its header"));
    header_len = le32(b, 8);
    at = 12;
  } else {
    throw UserError(cat("--data npy: ", source, " has .npy format version ", major, " (1, 2 or 3 are read)"));
  }
  if (at + header_len > b.size()) throw UserError(cat("--data npy: ", source, " is truncated in its header"));
  const std::string header = b.substr(at, header_len);
  std::smatch m;
  NpyArray a;
  a.source = source;
  if (!std::regex_search(header, m, std::regex(R"('descr'\s*:\s*'([^']*)')")))
    throw UserError(cat("--data npy: ", source, ": header has no 'descr'"));
  a.descr = m[1];
  if (std::regex_search(header, m, std::regex(R"('fortran_order'\s*:\s*True)")))
    throw UserError(cat("--data npy: ", source, " is in Fortran order; save it with np.ascontiguousarray"));
  if (!std::regex_search(header, m, std::regex(R"('shape'\s*:\s*\(([^)]*)\))")))
    throw UserError(cat("--data npy: ", source, ": header has no 'shape'"));
  const std::string dims = m[1];
  static const std::regex kNumber(R"(\d+)");
  for (std::sregex_iterator it(dims.begin(), dims.end(), kNumber), end; it != end; ++it)
    if (it->str().size() > 12 || (a.shape.push_back(std::stoll(it->str())), shape_numel(a.shape) > (int64_t(1) << 40)))
      throw UserError(cat("--data npy: ", source, ": shape (", dims, ") is too large"));
  const size_t es = element_size(a.descr);
  if (es == 0)
    throw UserError(cat("--data npy: ", source, " has dtype '", a.descr, "'; read are little-endian f4, f8 and "
                        "integers (u1, i1, i2, u2, i4, u4, i8, u8)"));
  const size_t want = static_cast<size_t>(shape_numel(a.shape)) * es, have = b.size() - at - header_len;
  if (have != want)
    throw UserError(cat("--data npy: ", source, " holds ", have, " bytes of data but its shape ",
                        shape_str(a.shape), " of ", a.descr, " needs ", want, " (truncated?)"));
  a.bytes = b.substr(at + header_len);
  return a;
}

// The members of a zip archive (what np.savez writes: stored, or deflated
// by np.savez_compressed; zip64 fields as numpy writes them).
std::map<std::string, std::string> read_zip(const fs::path& path) {
  const std::string z = slurp(path);
  const std::string where = path.string();
  size_t eocd = std::string::npos;
  if (z.size() >= 22) {
    const size_t lowest = z.size() > 22 + 65535 ? z.size() - 22 - 65535 : 0;  // a comment is at most 64 KiB
    for (size_t i = z.size() - 22 + 1; i-- > lowest;)
      if (le32(z, i) == 0x06054b50u) {
        eocd = i;
        break;
      }
  }
  if (eocd == std::string::npos) throw UserError(cat("--data npy: ", where, " is not a zip (.npz) archive"));
  uint64_t entries = le16(z, eocd + 10), dir_at = le32(z, eocd + 16);
  if (dir_at == 0xFFFFFFFFu && eocd >= 20 && le32(z, eocd - 20) == 0x07064b50u) {  // zip64 end locator
    const uint64_t z64 = le64(z, eocd - 12);
    if (z64 + 56 > z.size() || le32(z, z64) != 0x06064b50u) throw UserError(cat("--data npy: ", where, ": bad zip64 end record"));
    entries = le64(z, z64 + 32);
    dir_at = le64(z, z64 + 48);
  }
  std::map<std::string, std::string> out;
  size_t at = dir_at;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at + 46 > z.size() || le32(z, at) != 0x02014b50u)
      throw UserError(cat("--data npy: ", where, ": zip central directory is corrupt"));
    const uint16_t method = le16(z, at + 10), name_len = le16(z, at + 28), extra_len = le16(z, at + 30),
                   comment_len = le16(z, at + 32);
    uint64_t csize = le32(z, at + 20), usize = le32(z, at + 24), local = le32(z, at + 42);
    if (at + 46 + name_len + extra_len > z.size())
      throw UserError(cat("--data npy: ", where, ": zip central directory is truncated"));
    const std::string name = z.substr(at + 46, name_len);
    // zip64 extra field: the fields that are 0xFFFFFFFF above, in order.
    for (size_t x = at + 46 + name_len, xe = x + extra_len; x + 4 <= xe && x + 4 + le16(z, x + 2) <= xe;) {
      const uint16_t id = le16(z, x), len = le16(z, x + 2);
      size_t f = x + 4;
      if (id == 0x0001) {
        if (usize == 0xFFFFFFFFu) { usize = le64(z, f); f += 8; }
        if (csize == 0xFFFFFFFFu) { csize = le64(z, f); f += 8; }
        if (local == 0xFFFFFFFFu) { local = le64(z, f); }
      }
      x += 4 + len;
    }
    at += 46 + name_len + extra_len + comment_len;
    if (local + 30 > z.size() || le32(z, local) != 0x04034b50u)
      throw UserError(cat("--data npy: ", where, ": zip member ", name, " is corrupt"));
    const size_t data = local + 30 + le16(z, local + 26) + le16(z, local + 28);
    if (data + csize > z.size()) throw UserError(cat("--data npy: ", where, ": zip member ", name, " is truncated"));
    std::string bytes;
    if (method == 0) {
      bytes = z.substr(data, csize);
    } else if (method == 8) {
      if (usize > 1100 * csize + 1024)  // deflate cannot expand more than ~1032:1
        throw UserError(cat("--data npy: ", where, ": zip member ", name, " claims ", usize, " bytes from ", csize,
                            " (corrupt)"));
      bytes.resize(usize);
      z_stream s{};
      if (inflateInit2(&s, -MAX_WBITS) != Z_OK) throw RuntimeFailure("zlib inflateInit2 failed");
      s.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(z.data() + data));
      s.avail_in = static_cast<uInt>(csize);
      s.next_out = reinterpret_cast<Bytef*>(bytes.data());
      s.avail_out = static_cast<uInt>(usize);
      const int rc = inflate(&s, Z_FINISH);
      const bool ok = rc == Z_STREAM_END && s.total_out == usize;
      inflateEnd(&s);
      if (!ok) throw UserError(cat("--data npy: ", where, ": zip member ", name, " does not inflate (corrupt)"));
    } else {
      throw UserError(cat("--data npy: ", where, ": zip member ", name, " uses compression method ", method,
                          " (stored and deflate are read)"));
    }
    if (bytes.size() != usize) throw UserError(cat("--data npy: ", where, ": zip member ", name, " has the wrong size"));
    out[name] = std::move(bytes);
  }
  return out;
}

// Samples as the model's input dtype: floats (u1 scaled by 1/255) or tokens.
Tensor to_inputs(const NpyArray& a, DType want) {
  Tensor t = Tensor::empty(a.shape, want);
  const int64_t n = t.numel();
  const char* p = a.bytes.data();
  auto each = [&](auto read) {
    for (int64_t i = 0; i < n; ++i) {
      if (want == DType::F32) t.f32()[i] = static_cast<float>(read(i));
      else t.data<int32_t>()[i] = static_cast<int32_t>(read(i));
    }
  };
  auto typed = [&](auto zero) {
    each([&](int64_t i) {
      decltype(zero) v;
      std::memcpy(&v, p + i * int64_t(sizeof v), sizeof v);
      return v;
    });
  };
  const std::string& d = a.descr;
  const bool integer = d[1] != 'f';
  if (want == DType::F32) {
    if (d == "<f4") std::memcpy(t.raw(), p, a.bytes.size());
    else if (d == "<f8") typed(double{});
    else if (d == "|u1" || d == "<u1") each([&](int64_t i) { return static_cast<unsigned char>(p[i]) / 255.0f; });
    else throw UserError(cat("--data npy: ", a.source, " has dtype ", d, "; a model of float inputs reads f4, f8 or "
                             "u1 (scaled by 1/255)"));
    // A NaN or infinity would surface as a diverged loss, blamed on --lr.
    const float* x = t.f32();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(x[i]))
        throw UserError(cat("--data npy: ", a.source, " holds ", x[i], " in sample ",
                            i / std::max<int64_t>(1, n / std::max<int64_t>(1, a.shape.empty() ? 1 : a.shape[0])),
                            ": inputs must be finite numbers"));
  } else {
    if (!integer) throw UserError(cat("--data npy: ", a.source, " has dtype ", d, "; token inputs must be integers"));
    if (d == "<i4") std::memcpy(t.raw(), p, a.bytes.size());
    else if (d == "<i8") typed(int64_t{});
    else if (d == "<u2") typed(uint16_t{});
    else if (d == "<i2") typed(int16_t{});
    else if (d == "<u4") typed(uint32_t{});
    else typed(uint8_t{});
  }
  return t;
}

Tensor to_labels(const NpyArray& a, int64_t classes) {
  const std::string& d = a.descr;
  if (d[1] == 'f')
    throw UserError(cat("--data npy: ", a.source, " holds labels of dtype ", d, "; labels must be integers (class "
                        "indices: i1, u1, i2, u2, i4, u4, i8, u8)"));
  Tensor t = Tensor::empty(a.shape, DType::I32);
  const size_t es = element_size(d);
  const bool is_signed = d[1] == 'i';
  for (int64_t i = 0; i < t.numel(); ++i) {
    uint64_t raw = 0;
    std::memcpy(&raw, a.bytes.data() + static_cast<size_t>(i) * es, es);
    int64_t v = static_cast<int64_t>(raw);
    if (is_signed && es < 8 && (raw >> (8 * es - 1)) & 1u) v = static_cast<int64_t>(raw | (~uint64_t{0} << (8 * es)));
    if (v < 0 || v >= classes)
      throw UserError(cat("--data npy: ", a.source, ": label ", v, " at element ", i, " is outside [0, ", classes,
                          ") of the model's classes"));
    t.data<int32_t>()[i] = static_cast<int32_t>(v);
  }
  return t;
}

Tensor rows_of(const Tensor& t, const std::vector<int64_t>& rows) {
  Shape s = t.shape();
  s[0] = static_cast<int64_t>(rows.size());
  Tensor out = Tensor::empty(s, t.dtype());
  const size_t row = t.dim(0) ? t.nbytes() / static_cast<size_t>(t.dim(0)) : 0;
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(static_cast<char*>(out.raw()) + i * row,
                static_cast<const char*>(t.raw()) + static_cast<size_t>(rows[i]) * row, row);
  return out;
}

void check_pair(const NpyArray& x, const NpyArray& y, const Model& m) {
  if (x.rows() != y.rows() || x.shape.empty())
    throw UserError(cat("--data npy: ", x.source, " has ", x.rows(), " samples but ", y.source, " has ", y.rows(),
                        " labels"));
  Shape sample(x.shape.begin() + 1, x.shape.end()), label(y.shape.begin() + 1, y.shape.end());
  if (sample != m.input_shape)
    throw UserError(cat("--data npy: ", x.source, " has samples ", shape_str(sample), " but model ", m.name,
                        " takes ", shape_str(m.input_shape)));
  if (label != m.label_shape())
    throw UserError(cat("--data npy: ", y.source, " has labels ", shape_str(label), " per sample but model ", m.name,
                        " wants ", shape_str(m.label_shape())));
}

}  // namespace

DataSplits open_npy(const std::string& files, const Model& m, const DataOptions& o) {
  o.refuse_image_options("npy:");
  std::vector<std::string> parts;
  for (size_t at = 0; at <= files.size();) {
    const size_t comma = files.find(',', at);
    parts.push_back(files.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  NpyArray xtr, ytr, xte, yte;
  bool has_test = false;
  if (parts.size() == 1 && fs::path(parts[0]).extension() == ".npz") {
    auto members = read_zip(parts[0]);
    auto member = [&](const std::string& name) -> const std::string* {
      auto it = members.find(name + ".npy");
      return it == members.end() ? nullptr : &it->second;
    };
    auto array = [&](const std::string& name) { return parse_npy(*member(name), cat(parts[0], ":", name)); };
    if (member("x_train") && member("y_train") && member("x_test") && member("y_test")) {
      xtr = array("x_train"), ytr = array("y_train"), xte = array("x_test"), yte = array("y_test");
      has_test = true;
    } else if (member("x") && member("y")) {
      xtr = array("x"), ytr = array("y");
    } else {
      std::string names;
      for (const auto& [k, v] : members) names += (names.empty() ? "" : ", ") + k;
      throw UserError(cat("--data npy: ", parts[0], " holds ", names.empty() ? "no arrays" : names,
                          "; want x and y, or x_train, y_train, x_test and y_test"));
    }
  } else if (parts.size() == 2 || parts.size() == 4) {
    for (const std::string& p : parts)
      if (fs::path(p).extension() != ".npy")
        throw UserError(cat("--data npy: ", p, " is not a .npy file (give X.npy,Y.npy[,Xtest.npy,Ytest.npy] or one "
                            ".npz)"));
    xtr = parse_npy(slurp(parts[0]), parts[0]);
    ytr = parse_npy(slurp(parts[1]), parts[1]);
    if (parts.size() == 4) {
      xte = parse_npy(slurp(parts[2]), parts[2]);
      yte = parse_npy(slurp(parts[3]), parts[3]);
      has_test = true;
    }
  } else {
    throw UserError(cat("--data npy:", files, ": give X.npy,Y.npy (optionally Xtest.npy,Ytest.npy) or one FILE.npz"));
  }
  check_pair(xtr, ytr, m);
  const int64_t classes = m.classes;
  Tensor x = to_inputs(xtr, m.input_dtype), y = to_labels(ytr, classes);
  DataSplits s;
  if (has_test) {
    check_pair(xte, yte, m);
    s.train = in_memory_dataset("npy/train", std::move(x), std::move(y), classes);
    s.test = in_memory_dataset("npy/test", to_inputs(xte, m.input_dtype), to_labels(yte, classes), classes);
  } else {
    const int64_t stride = held_out_stride(o.val);
    std::vector<int64_t> train_rows, test_rows;
    for (int64_t i = 0; i < x.dim(0); ++i) (is_held_out(i, stride) ? test_rows : train_rows).push_back(i);
    if (test_rows.empty() || train_rows.empty())
      throw UserError(cat("--data npy: ", xtr.source, " has ", x.dim(0), " samples: too few to hold out every ",
                          stride, "th"));
    s.train = in_memory_dataset("npy/train", rows_of(x, train_rows), rows_of(y, train_rows), classes);
    s.test = in_memory_dataset("npy/test", rows_of(x, test_rows), rows_of(y, test_rows), classes);
  }
  return s;
}

}  // namespace pd::data
