// npy:X.npy,Y.npy and npy:FILE.npz - NumPy arrays of samples and labels.
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "models/data/data_file.h"
#include "models/data/readers.h"

namespace pd::data {

namespace {

namespace fs = std::filesystem;

// The longest .npy header read: version 1's length field holds at most
// this, numpy itself refuses longer ones by default (max_header_size=10000),
// and a header of the dtypes read here is under 200 bytes.
constexpr uint64_t kMaxNpyHeader = 65535;
// An .npz's central directory lists a few arrays: a few KB.
constexpr uint64_t kMaxZipDirectory = uint64_t{16} << 20;
// Compressed input is inflated through a buffer of this size.
constexpr size_t kInflateChunk = size_t{1} << 20;

uint32_t le32(const char* s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}
uint16_t le16(const char* s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s);
  return static_cast<uint16_t>(p[0] | (p[1] << 8));
}
uint64_t le64(const char* s) { return uint64_t{le32(s)} | (uint64_t{le32(s + 4)} << 32); }
uint32_t le32(const std::string& s, size_t at) { return le32(s.data() + at); }
uint16_t le16(const std::string& s, size_t at) { return le16(s.data() + at); }
uint64_t le64(const std::string& s, size_t at) { return le64(s.data() + at); }

size_t element_size(const std::string& descr) {
  static const std::map<std::string, size_t> sizes = {{"<f4", 4}, {"<f8", 8}, {"|u1", 1}, {"<u1", 1}, {"|i1", 1},
                                                      {"<i1", 1}, {"<i2", 2}, {"<u2", 2}, {"<i4", 4}, {"<u4", 4},
                                                      {"<i8", 8}, {"<u8", 8}};
  auto it = sizes.find(descr);
  return it == sizes.end() ? 0 : it->second;
}

// Where one array's .npy bytes lie in a file: all of a .npy file, or one
// member of an .npz (stored, or deflated as np.savez_compressed writes).
struct Member {
  uint64_t offset = 0, stored = 0, size = 0;  // in the file; bytes there; .npy bytes they give
  bool deflated = false;
  bool zipped = false;  // an .npz member: its CRC-32 is checked
  uint32_t crc = 0;
};

// A member's .npy bytes, read in order. Compressed bytes are read in
// chunks, so an .npz member costs the buffer, not its compressed size.
class MemberStream {
 public:
  MemberStream(const DataFile& f, const Member& m, std::string source) : f_(f), m_(m), source_(std::move(source)) {
    if (m_.deflated) {
      if (inflateInit2(&z_, -MAX_WBITS) != Z_OK) throw RuntimeFailure("zlib inflateInit2 failed");
      inflating_ = true;
      in_.resize(kInflateChunk);
    }
  }
  MemberStream(const MemberStream&) = delete;
  MemberStream& operator=(const MemberStream&) = delete;
  ~MemberStream() {
    if (inflating_) inflateEnd(&z_);
  }

  // Exactly n more bytes of the member.
  void read(char* dst, uint64_t n) {
    if (n > m_.size - pos_) throw corrupt(cat("ends at byte ", m_.size, " where ", pos_ + n, " are needed"));
    if (!m_.deflated) f_.read_into(m_.offset + pos_, dst, n);
    else inflate_into(dst, n);
    for (uint64_t done = 0; m_.zipped && done < n;) {
      const uInt chunk = static_cast<uInt>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
      crc_ = crc32(crc_, reinterpret_cast<const Bytef*>(dst + done), chunk);
      done += chunk;
    }
    pos_ += n;
  }
  // Every byte read: the deflate stream must end here, and the CRC match.
  void finish() {
    if (m_.deflated) {
      // The stream's end-of-block may still be pending in zlib's state or input.
      for (;;) {
        char extra = 0;
        z_.next_out = reinterpret_cast<Bytef*>(&extra);
        z_.avail_out = 1;
        if (z_.avail_in == 0) fill();
        const int rc = inflate(&z_, Z_NO_FLUSH);
        if (z_.avail_out == 0) throw corrupt(cat("inflates to more than the ", m_.size, " bytes its zip entry says"));
        if (rc == Z_STREAM_END) break;
        if (rc != Z_OK) throw corrupt("does not inflate: its deflate stream is cut short or damaged");
      }
    }
    if (m_.zipped && crc_ != m_.crc) throw corrupt("fails its CRC-32 check (the archive is damaged)");
  }

 private:
  UserError corrupt(const std::string& why) const { return UserError(cat("--data npy: ", source_, " ", why)); }
  bool fill() {
    const uint64_t chunk = std::min<uint64_t>(kInflateChunk, m_.stored - in_pos_);
    if (chunk == 0) return false;
    f_.read_into(m_.offset + in_pos_, in_.data(), chunk);
    in_pos_ += chunk;
    z_.next_in = reinterpret_cast<Bytef*>(in_.data());
    z_.avail_in = static_cast<uInt>(chunk);
    return true;
  }
  void inflate_into(char* dst, uint64_t n) {
    for (uint64_t done = 0; done < n;) {
      const uInt want = static_cast<uInt>(std::min<uint64_t>(n - done, uint64_t{1} << 30));
      z_.next_out = reinterpret_cast<Bytef*>(dst + done);
      z_.avail_out = want;
      if (z_.avail_in == 0) fill();  // none left: zlib may still hold output
      const int rc = inflate(&z_, Z_NO_FLUSH);
      done += want - z_.avail_out;
      if (rc == Z_STREAM_END && done < n)
        throw corrupt(cat("inflates to fewer than the ", m_.size, " bytes its zip entry says"));
      if (rc == Z_BUF_ERROR) throw corrupt("is truncated: its compressed data end early");
      if (rc != Z_OK && rc != Z_STREAM_END) throw corrupt(cat("does not inflate (corrupt deflate data, zlib error ", rc, ")"));
    }
  }

  const DataFile& f_;
  Member m_;
  std::string source_;
  uint64_t pos_ = 0, in_pos_ = 0;
  std::vector<char> in_;
  z_stream z_{};
  bool inflating_ = false;
  uLong crc_ = crc32(0L, Z_NULL, 0);
};

// One array's header: element type as NumPy spells it ("<f4"), shape, and
// where its data lie.
struct NpyArray {
  std::string source;  // "x.npy" or "data.npz:x_train" (for messages)
  const DataFile* file = nullptr;
  Member member;
  uint64_t data_at = 0;  // where the data start among the member's bytes
  std::string descr;
  Shape shape;
  int64_t rows() const { return shape.empty() ? 0 : shape[0]; }
  uint64_t data_bytes() const { return member.size - data_at; }
};

// The header's Python dict literal, as numpy writes it:
//   {'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }
// scanned by hand (a regex recursed on it and overflowed the stack) and
// strictly: the three keys once each, a string, True or False, and a tuple
// of non-negative integers separated by commas.
class NpyHeaderScanner {
 public:
  NpyHeaderScanner(std::string_view text, const std::string& source) : s_(text), source_(source) {}

  void scan(NpyArray& a) {
    bool fortran = false, has_descr = false, has_fortran = false, has_shape = false;
    expect('{', "to start with '{'");
    while (!eat('}')) {
      const std::string key = string("a key");
      expect(':', cat("':' after key '", key, "'"));
      if (key == "descr" && !has_descr) {
        a.descr = string("'descr' to be a string such as '<f4'");
        has_descr = true;
      } else if (key == "fortran_order" && !has_fortran) {
        fortran = boolean();
        has_fortran = true;
      } else if (key == "shape" && !has_shape) {
        a.shape = tuple();
        has_shape = true;
      } else {
        const bool twice = (has_descr && key == "descr") || (has_fortran && key == "fortran_order") ||
                           (has_shape && key == "shape");
        fail(twice ? cat("has key '", key, "' twice")
                 : cat("has key '", key, "' (a .npy header has 'descr', 'fortran_order' and 'shape')"));
      }
      if (!eat(',')) {
        expect('}', "',' or '}' after a value");
        break;
      }
    }
    space();
    if (at_ != s_.size()) fail("has text after its closing '}'");
    if (!has_descr || !has_fortran || !has_shape)
      fail(cat("lacks '", !has_descr ? "descr" : !has_fortran ? "fortran_order" : "shape", "'"));
    if (fortran)
      throw UserError(cat("--data npy: ", source_, " is in Fortran order; save it with np.ascontiguousarray"));
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError(cat("--data npy: ", source_, ": its .npy header ", why, " (at byte ", at_, " of the header)"));
  }
  void space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n' || s_[at_] == '\r')) ++at_;
  }
  bool eat(char c) {
    space();
    if (at_ < s_.size() && s_[at_] == c) return ++at_, true;
    return false;
  }
  void expect(char c, const std::string& what) {
    if (!eat(c)) fail(cat("expects ", what));
  }
  std::string string(const std::string& what) {
    space();
    if (at_ >= s_.size() || (s_[at_] != '\'' && s_[at_] != '"')) fail(cat("expects ", what));
    const char quote = s_[at_++];
    const size_t begin = at_;
    while (at_ < s_.size() && s_[at_] != quote) {
      if (s_[at_] == '\\') fail("has an escape in a string");
      if (at_ - begin >= 64) fail("has a string longer than any dtype or key it may hold");
      ++at_;
    }
    if (at_ >= s_.size()) fail("has a string without its closing quote");
    return std::string(s_.substr(begin, at_++ - begin));
  }
  bool boolean() {
    space();
    if (s_.substr(at_, 4) == "True") return at_ += 4, true;
    if (s_.substr(at_, 5) == "False") return at_ += 5, false;
    fail("expects 'fortran_order' to be True or False");
  }
  Shape tuple() {
    expect('(', "'shape' to be a tuple such as (60000, 28, 28)");
    Shape out;
    if (eat(')')) return out;
    for (;;) {
      out.push_back(dimension());
      if (out.size() > 32) fail("has a shape of more than 32 dimensions (NumPy's limit)");
      const bool comma = eat(',');
      if (eat(')')) {
        if (out.size() == 1 && !comma) fail("has shape (n) where a tuple is (n,)");
        return out;
      }
      if (!comma) fail("expects ',' between the shape's dimensions");
    }
  }
  int64_t dimension() {
    space();
    if (at_ < s_.size() && s_[at_] == '-') fail("has a negative dimension in its shape");
    const size_t begin = at_;
    while (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') ++at_;
    if (at_ == begin) fail("has something other than a non-negative integer in its shape");
    if (at_ - begin > 12) fail(cat("has shape dimension ", s_.substr(begin, at_ - begin), ": too large"));
    return std::stoll(std::string(s_.substr(begin, at_ - begin)));
  }

  std::string_view s_;
  const std::string& source_;
  size_t at_ = 0;
};

// The .npy format: magic, version, header length, the header; then the
// data, whose size must be what the header's shape and dtype say.
NpyArray read_npy_header(const DataFile& f, const Member& m, const std::string& source) {
  NpyArray a;
  a.source = source;
  a.file = &f;
  a.member = m;
  MemberStream in(f, m, source);
  char pre[12];
  if (m.size < 10) throw UserError(cat("--data npy: ", source, " is not a .npy file (shorter than a .npy header)"));
  in.read(pre, 10);
  if (std::memcmp(pre, "\x93NUMPY", 6) != 0)
    throw UserError(cat("--data npy: ", source, " is not a .npy file (no \\x93NUMPY magic)"));
  const int major = static_cast<unsigned char>(pre[6]);
  uint64_t header_len = 0;
  if (major == 1) {
    header_len = le16(pre + 8);
    a.data_at = 10;
  } else if (major == 2 || major == 3) {
    if (m.size < 12) throw UserError(cat("--data npy: ", source, " is truncated in its header"));
    in.read(pre + 10, 2);
    header_len = le32(pre + 8);
    a.data_at = 12;
  } else {
    throw UserError(cat("--data npy: ", source, " has .npy format version ", major, " (1, 2 or 3 are read)"));
  }
  if (header_len > kMaxNpyHeader)
    throw UserError(cat("--data npy: ", source, " has a header of ", header_len, " bytes; at most ", kMaxNpyHeader,
                        " are read (NumPy writes under 200 for these dtypes)"));
  if (a.data_at + header_len > m.size) throw UserError(cat("--data npy: ", source, " is truncated in its header"));
  std::string header(header_len, '\0');
  in.read(header.data(), header_len);
  a.data_at += header_len;
  NpyHeaderScanner(header, source).scan(a);
  int64_t numel = 1;
  for (int64_t d : a.shape)
    if (d != 0 && (numel *= d, numel > (int64_t(1) << 40)))
      throw UserError(cat("--data npy: ", source, ": shape ", shape_str(a.shape), " is too large"));
  const size_t es = element_size(a.descr);
  if (es == 0)
    throw UserError(cat("--data npy: ", source, " has dtype '", a.descr, "'; read are little-endian f4, f8 and "
                        "integers (u1, i1, i2, u2, i4, u4, i8, u8)"));
  const uint64_t want = static_cast<uint64_t>(shape_numel(a.shape)) * es, have = m.size - a.data_at;
  if (have != want)
    throw UserError(cat("--data npy: ", source, " holds ", have, " bytes of data but its shape ",
                        shape_str(a.shape), " of ", a.descr, " needs ", want, have < want ? " (truncated?)" : ""));
  return a;
}

// An array's data bytes (allocated only now that the header vouches for
// their size, and checked against the zip entry's CRC).
std::string read_npy_data(const NpyArray& a) {
  MemberStream in(*a.file, a.member, a.source);
  std::string skipped(a.data_at, '\0');
  in.read(skipped.data(), a.data_at);
  const std::string what = a.source == a.file->path() ? "bytes" : cat("bytes for ", a.source);
  std::string bytes = a.file->allocate<std::string>(a.data_bytes(), what.c_str());
  in.read(bytes.data(), bytes.size());
  in.finish();
  return bytes;
}

// The members of a zip archive (what np.savez writes: stored, or deflated
// by np.savez_compressed; zip64 fields as numpy writes them). Only the
// end record and the central directory are read here.
std::map<std::string, Member> read_zip(const DataFile& f) {
  const uint64_t size = f.size();
  const uint64_t tail_len = std::min<uint64_t>(size, 22 + 65535);  // a comment is at most 64 KiB
  const std::string tail = f.read(size - tail_len, tail_len);
  size_t eocd = std::string::npos;
  for (size_t i = tail.size() >= 22 ? tail.size() - 22 + 1 : 0; i-- > 0;)
    if (le32(tail, i) == 0x06054b50u) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) throw f.error("is not a zip (.npz) archive");
  uint64_t entries = le16(tail, eocd + 10), dir_len = le32(tail, eocd + 12), dir_at = le32(tail, eocd + 16);
  if (eocd >= 20 && le32(tail, eocd - 20) == 0x07064b50u) {  // zip64 end locator
    const uint64_t z64 = le64(tail, eocd - 12);
    if (z64 > size || size - z64 < 56) throw f.error("has a bad zip64 end record");
    const std::string rec = f.read(z64, 56);
    if (le32(rec, 0) != 0x06064b50u) throw f.error("has a bad zip64 end record");
    entries = le64(rec, 32);
    dir_len = le64(rec, 40);
    dir_at = le64(rec, 48);
  }
  if (dir_at > size || dir_len > size - dir_at) throw f.error("has a zip central directory outside the file (corrupt)");
  if (dir_len > kMaxZipDirectory)
    throw f.error(cat("has a zip central directory of ", dir_len, " bytes (an .npz of a few arrays has a few KB)"));
  const std::string dir = f.read(dir_at, dir_len);
  std::map<std::string, Member> out;
  size_t at = 0;
  for (uint64_t e = 0; e < entries; ++e) {
    if (at + 46 > dir.size() || le32(dir, at) != 0x02014b50u) throw f.error("has a corrupt zip central directory");
    const uint16_t method = le16(dir, at + 10), name_len = le16(dir, at + 28), extra_len = le16(dir, at + 30),
                   comment_len = le16(dir, at + 32);
    Member m;
    m.zipped = true;
    m.crc = le32(dir, at + 16);
    m.stored = le32(dir, at + 20);
    m.size = le32(dir, at + 24);
    uint64_t local = le32(dir, at + 42);
    if (at + 46 + name_len + extra_len > dir.size()) throw f.error("has a truncated zip central directory");
    const std::string name = dir.substr(at + 46, name_len);
    // zip64 extra field: the fields that are 0xFFFFFFFF above, in order.
    for (size_t x = at + 46 + name_len, xe = x + extra_len; x + 4 <= xe && x + 4 + le16(dir, x + 2) <= xe;) {
      const uint16_t id = le16(dir, x), len = le16(dir, x + 2);
      size_t field = x + 4;
      if (id == 0x0001) {
        auto next = [&](uint64_t& v) {
          if (v != 0xFFFFFFFFu) return;
          if (field + 8 > x + 4 + len) throw f.error(cat("zip member ", name, " has a short zip64 field (corrupt)"));
          v = le64(dir, field);
          field += 8;
        };
        next(m.size);
        next(m.stored);
        next(local);
      }
      x += 4 + len;
    }
    at += 46 + name_len + extra_len + comment_len;
    if (out.count(name)) throw f.error(cat("holds zip member ", name, " twice (which one is meant?)"));
    if (local > size || size - local < 30) throw f.error(cat("zip member ", name, " is corrupt (its header lies outside the file)"));
    const std::string head = f.read(local, 30);
    if (le32(head, 0) != 0x04034b50u) throw f.error(cat("zip member ", name, " is corrupt (no local header)"));
    m.offset = local + 30 + le16(head, 26) + le16(head, 28);
    if (m.offset > size || m.stored > size - m.offset) throw f.error(cat("zip member ", name, " is truncated"));
    if (method == 0) {
      if (m.stored != m.size) throw f.error(cat("zip member ", name, " is stored with two sizes (corrupt)"));
    } else if (method == 8) {
      m.deflated = true;
      if (m.size / 1100 > m.stored + 1)  // deflate cannot expand more than ~1032:1
        throw f.error(cat("zip member ", name, " claims ", m.size, " bytes from ", m.stored, " (corrupt)"));
    } else {
      throw f.error(cat("zip member ", name, " uses compression method ", method, " (stored and deflate are read)"));
    }
    out[name] = m;
  }
  return out;
}

// Element i of an integer array; u8 values beyond int64 read as INT64_MAX
// (outside every range they are checked against).
int64_t integer_at(const std::string& bytes, const std::string& descr, int64_t i) {
  const size_t es = element_size(descr);
  uint64_t raw = 0;
  std::memcpy(&raw, bytes.data() + static_cast<size_t>(i) * es, es);
  if (descr[1] == 'u') return raw > uint64_t(INT64_MAX) ? INT64_MAX : static_cast<int64_t>(raw);
  if (es < 8 && ((raw >> (8 * es - 1)) & 1u)) raw |= ~uint64_t{0} << (8 * es);  // sign-extend
  return static_cast<int64_t>(raw);
}

// A tensor for data of `source`, or a UserError naming it when the memory
// is not there (on the host, the only way Tensor::empty fails).
Tensor tensor_for(const std::string& source, const Shape& shape, DType dtype) {
  try {
    return Tensor::empty(shape, dtype);
  } catch (const RuntimeFailure& e) {
    throw UserError(cat("--data npy: ", source, " needs ", static_cast<uint64_t>(shape_numel(shape)) * dtype_size(dtype),
                        " bytes in memory as ", dtype_name(dtype), ", which could not be allocated (", e.what(), ")"));
  }
}

// Samples as the model's input dtype: floats (u1 scaled by 1/255) or token
// ids in [0, vocab), from any integer dtype.
Tensor to_inputs(const NpyArray& a, const std::string& bytes, DType want, int64_t vocab) {
  Tensor t = tensor_for(a.source, a.shape, want);
  const int64_t n = t.numel();
  const char* p = bytes.data();
  const std::string& d = a.descr;
  const bool integer = d[1] != 'f';
  if (want == DType::F32) {
    if (d == "<f4") {
      if (!bytes.empty()) std::memcpy(t.raw(), p, bytes.size());
    } else if (d == "<f8") {
      for (int64_t i = 0; i < n; ++i) {
        double v;
        std::memcpy(&v, p + i * int64_t(sizeof v), sizeof v);
        t.f32()[i] = static_cast<float>(v);
      }
    } else if (d == "|u1" || d == "<u1") {
      for (int64_t i = 0; i < n; ++i) t.f32()[i] = static_cast<unsigned char>(p[i]) / 255.0f;
    } else {
      throw UserError(cat("--data npy: ", a.source, " has dtype ", d, "; a model of float inputs reads f4, f8 or "
                          "u1 (scaled by 1/255)"));
    }
    // A NaN or infinity would surface as a diverged loss, blamed on --lr.
    const float* x = t.f32();
    for (int64_t i = 0; i < n; ++i)
      if (!std::isfinite(x[i]))
        throw UserError(cat("--data npy: ", a.source, " holds ", x[i], " in sample ",
                            i / std::max<int64_t>(1, n / std::max<int64_t>(1, a.shape.empty() ? 1 : a.shape[0])),
                            ": inputs must be finite numbers"));
  } else {
    if (!integer) throw UserError(cat("--data npy: ", a.source, " has dtype ", d, "; token inputs must be integers"));
    int32_t* out = t.data<int32_t>();
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = integer_at(bytes, d, i);
      if (v < 0 || v >= vocab)
        throw UserError(cat("--data npy: ", a.source, " holds token id ", v, " at element ", i, "; ids must be in [0, ",
                            vocab, ") of the model's vocabulary (set the model's vocab option)"));
      out[i] = static_cast<int32_t>(v);
    }
  }
  return t;
}

Tensor to_labels(const NpyArray& a, const std::string& bytes, int64_t classes) {
  const std::string& d = a.descr;
  if (d[1] == 'f')
    throw UserError(cat("--data npy: ", a.source, " holds labels of dtype ", d, "; labels must be integers (class "
                        "indices: i1, u1, i2, u2, i4, u4, i8, u8)"));
  Tensor t = tensor_for(a.source, a.shape, DType::I32);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = integer_at(bytes, d, i);
    if (v < 0 || v >= classes)
      throw UserError(cat("--data npy: ", a.source, ": label ", v, " at element ", i, " is outside [0, ", classes,
                          ") of the model's classes"));
    t.data<int32_t>()[i] = static_cast<int32_t>(v);
  }
  return t;
}

// Each array's data is read, converted and dropped before the next is read.
Tensor read_inputs(const NpyArray& a, const Model& m) { return to_inputs(a, read_npy_data(a), m.input_dtype, m.classes); }
Tensor read_labels(const NpyArray& a, const Model& m) { return to_labels(a, read_npy_data(a), m.classes); }

Tensor rows_of(const Tensor& t, const std::vector<int64_t>& rows, const std::string& source) {
  Shape s = t.shape();
  s[0] = static_cast<int64_t>(rows.size());
  Tensor out = tensor_for(source, s, t.dtype());
  const size_t row = t.dim(0) ? t.nbytes() / static_cast<size_t>(t.dim(0)) : 0;
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(static_cast<char*>(out.raw()) + i * row,
                static_cast<const char*>(t.raw()) + static_cast<size_t>(rows[i]) * row, row);
  return out;
}

void check_pair(const NpyArray& x, const NpyArray& y, const Model& m) {
  if (x.rows() != y.rows() || x.shape.empty() || y.shape.empty())
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
  std::vector<std::unique_ptr<DataFile>> open_files;  // open while their arrays are read
  if (parts.size() == 1 && fs::path(parts[0]).extension() == ".npz") {
    const DataFile& f = *open_files.emplace_back(std::make_unique<DataFile>(parts[0], "--data npy"));
    const auto members = read_zip(f);
    auto member = [&](const std::string& name) -> const Member* {
      auto it = members.find(name + ".npy");
      return it == members.end() ? nullptr : &it->second;
    };
    auto array = [&](const std::string& name) { return read_npy_header(f, *member(name), cat(parts[0], ":", name)); };
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
    auto array = [&](const std::string& p) {
      const DataFile& f = *open_files.emplace_back(std::make_unique<DataFile>(p, "--data npy"));
      return read_npy_header(f, Member{0, f.size(), f.size(), false, false, 0}, p);
    };
    xtr = array(parts[0]);
    ytr = array(parts[1]);
    if (parts.size() == 4) {
      xte = array(parts[2]);
      yte = array(parts[3]);
      has_test = true;
    }
  } else {
    throw UserError(cat("--data npy:", files, ": give X.npy,Y.npy (optionally Xtest.npy,Ytest.npy) or one FILE.npz"));
  }
  check_pair(xtr, ytr, m);
  if (has_test) check_pair(xte, yte, m);
  const int64_t classes = m.classes;
  Tensor x = read_inputs(xtr, m), y = read_labels(ytr, m);
  DataSplits s;
  if (has_test) {
    s.train = in_memory_dataset("npy/train", std::move(x), std::move(y), classes);
    s.test = in_memory_dataset("npy/test", read_inputs(xte, m), read_labels(yte, m), classes);
  } else {
    const int64_t stride = held_out_stride(o.val);
    std::vector<int64_t> train_rows, test_rows;
    for (int64_t i = 0; i < x.dim(0); ++i) (is_held_out(i, stride) ? test_rows : train_rows).push_back(i);
    if (test_rows.empty() || train_rows.empty())
      throw UserError(cat("--data npy: ", xtr.source, " has ", x.dim(0), " samples: too few to hold out every ",
                          stride, "th"));
    s.train = in_memory_dataset("npy/train", rows_of(x, train_rows, xtr.source), rows_of(y, train_rows, ytr.source),
                                classes);
    s.test = in_memory_dataset("npy/test", rows_of(x, test_rows, xtr.source), rows_of(y, test_rows, ytr.source),
                               classes);
  }
  return s;
}

}  // namespace pd::data
