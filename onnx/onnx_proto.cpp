#include "onnx/onnx_proto.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "core/error.h"
#include "core/input_file.h"
#include "core/tensor.h"

namespace pd::onnx {

namespace {

// One protobuf message's bytes: a cursor that refuses to read past its end.
// Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
class Reader {
 public:
  Reader(const char* begin, size_t size, size_t base, const std::string* source, const char* what)
      : p_(reinterpret_cast<const uint8_t*>(begin)), size_(size), base_(base), source_(source), what_(what) {}

  bool done() const { return pos_ >= size_; }
  const char* here() const { return reinterpret_cast<const char*>(p_ + pos_); }

  // Reads a field key; returns the field number and sets the wire type.
  uint32_t key(int& wire) {
    uint64_t k = varint();
    wire = static_cast<int>(k & 7);
    if ((k >> 3) == 0 || (k >> 3) > 0x1fffffff) fail("bad field number");
    return static_cast<uint32_t>(k >> 3);
  }

  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= size_) fail("truncated varint");
      uint8_t b = p_[pos_++];
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    fail("varint longer than 10 bytes");
  }
  int64_t int64() { return static_cast<int64_t>(varint()); }

  uint32_t fixed32() {
    need(4);
    uint32_t v;
    std::memcpy(&v, p_ + pos_, 4);
    pos_ += 4;
    return v;
  }
  uint64_t fixed64() {
    need(8);
    uint64_t v;
    std::memcpy(&v, p_ + pos_, 8);
    pos_ += 8;
    return v;
  }
  float float32() {
    uint32_t u = fixed32();
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }

  // A length-delimited field as a sub-reader over its bytes.
  Reader sub(const char* what) {
    uint64_t n = varint();
    need(n);
    Reader r(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n), base_ + pos_, source_, what);
    pos_ += static_cast<size_t>(n);
    return r;
  }
  // Whether the length-delimited field at the cursor runs past the end
  // (the cursor is left where it was).
  bool truncated_field() {
    const size_t keep = pos_;
    const uint64_t n = varint();
    const bool cut = n > size_ - pos_;
    pos_ = keep;
    return cut;
  }
  // The rest of the buffer after a length prefix, as a sub-reader.
  Reader rest(const char* what) {
    varint();
    Reader r(reinterpret_cast<const char*>(p_ + pos_), size_ - pos_, base_ + pos_, source_, what);
    pos_ = size_;
    return r;
  }
  // A length-delimited field's bytes in place (not copied: a large
  // raw_data left unread is never paged in), with its offset in the buffer.
  std::string_view view(uint64_t& at) {
    uint64_t n = varint();
    need(n);
    at = base_ + pos_;
    std::string_view v(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return v;
  }
  std::string bytes() {
    uint64_t n = varint();
    need(n);
    std::string s(reinterpret_cast<const char*>(p_ + pos_), static_cast<size_t>(n));
    pos_ += static_cast<size_t>(n);
    return s;
  }

  void skip(int wire) {
    switch (wire) {
      case 0: varint(); break;
      case 1: need(8); pos_ += 8; break;
      case 2: { uint64_t n = varint(); need(n); pos_ += static_cast<size_t>(n); break; }
      case 5: need(4); pos_ += 4; break;
      default: fail(cat("unsupported wire type ", wire));
    }
  }

  // Repeated scalars come packed (one length-delimited run) or one per key.
  void ints(int wire, std::vector<int64_t>& out) {
    if (wire == 2) {
      Reader r = sub(what_);
      while (!r.done()) out.push_back(r.int64());
    } else {
      expect(wire, 0);
      out.push_back(int64());
    }
  }
  void floats(int wire, std::vector<float>& out) {
    if (wire == 2) {
      Reader r = sub(what_);
      if (r.size_ % 4 != 0) fail("packed floats not a multiple of 4 bytes");
      while (!r.done()) out.push_back(r.float32());
    } else {
      expect(wire, 5);
      out.push_back(float32());
    }
  }
  void doubles(int wire, std::vector<float>& out) {
    if (wire == 2) {
      Reader r = sub(what_);
      if (r.size_ % 8 != 0) fail("packed doubles not a multiple of 8 bytes");
      while (!r.done()) {
        uint64_t u = r.fixed64();
        double d;
        std::memcpy(&d, &u, 8);
        out.push_back(static_cast<float>(d));
      }
    } else {
      expect(wire, 1);
      uint64_t u = fixed64();
      double d;
      std::memcpy(&d, &u, 8);
      out.push_back(static_cast<float>(d));
    }
  }

  void expect(int wire, int want) {
    if (wire != want) fail(cat("wire type ", wire, " where ", want, " was expected"));
  }
  [[noreturn]] void fail(const std::string& why) const {
    throw UserError(cat(*source_, ": not a valid ONNX file: ", what_, " at byte ", base_ + pos_, ": ", why,
                        " (truncated or corrupted? re-export it)"));
  }

 private:
  void need(uint64_t n) const {
    if (n > size_ - pos_) fail(cat("needs ", n, " bytes, only ", size_ - pos_, " left"));
  }
  const uint8_t* p_;
  size_t size_, pos_ = 0, base_;
  const std::string* source_;
  const char* what_;
};

float half_to_float(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ff, bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal
      exp = 127 - 15 + 1;
      while (!(mant & 0x400)) { mant <<= 1; --exp; }
      bits = sign | (exp << 23) | ((mant & 0x3ff) << 13);
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000 | (mant << 13);
  } else {
    bits = sign | ((exp - 15 + 127) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// raw_data holds little-endian values of the tensor's type.
void decode_raw(TensorValue& t, std::string_view raw, Reader& r) {
  auto each = [&](size_t width, auto&& put) {
    if (raw.size() % width != 0) r.fail(cat("tensor '", t.name, "': raw_data of ", raw.size(), " bytes is not a whole number of ", width, "-byte values"));
    for (size_t k = 0; k < raw.size(); k += width) put(raw.data() + k);
  };
  switch (t.data_type) {
    case kFloat: each(4, [&](const char* p) { float f; std::memcpy(&f, p, 4); t.floats.push_back(f); }); break;
    case kDouble: each(8, [&](const char* p) { double d; std::memcpy(&d, p, 8); t.floats.push_back(float(d)); }); break;
    case kFloat16: each(2, [&](const char* p) { uint16_t h; std::memcpy(&h, p, 2); t.floats.push_back(half_to_float(h)); }); break;
    case kInt64: each(8, [&](const char* p) { int64_t v; std::memcpy(&v, p, 8); t.ints.push_back(v); }); break;
    case kInt32: each(4, [&](const char* p) { int32_t v; std::memcpy(&v, p, 4); t.ints.push_back(v); }); break;
    case kInt8: each(1, [&](const char* p) { t.ints.push_back(static_cast<int8_t>(*p)); }); break;
    case kUint8: case kBool: each(1, [&](const char* p) { t.ints.push_back(static_cast<uint8_t>(*p)); }); break;
    default: r.fail(cat("tensor '", t.name, "' has data type ", onnx_type_name(t.data_type), ", which the importer does not read"));
  }
}

// A model parsed from a file on disk: where its external data may be, and
// which file a deferred raw_data lies in.
struct ModelFile {
  std::string path;
  std::filesystem::path folder;
  bool mapped = false;  // parsed from a mapping of the file
};

// A mapped initializer once parsed: its pages are let go (they are clean
// file pages, read again from the page cache if touched), so a parse never
// holds more than a few of them however the kernel maps pages around a
// fault (whole large folios on recent kernels).
void release_mapped(const ModelFile* file, const char* begin, const char* end) {
  if (!file || !file->mapped) return;
  const uintptr_t page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const uintptr_t from = reinterpret_cast<uintptr_t>(begin) & ~(page - 1);
  const uintptr_t to = (reinterpret_cast<uintptr_t>(end) + page - 1) & ~(page - 1);
  if (to > from) ::madvise(reinterpret_cast<void*>(from), to - from, MADV_DONTNEED);
}

size_t value_width(int32_t type) {
  switch (type) {
    case kFloat: case kInt32: return 4;
    case kDouble: case kInt64: return 8;
    case kFloat16: return 2;
    case kInt8: case kUint8: case kBool: return 1;
    default: return 0;
  }
}

// The bytes a tensor's values take in raw form, checked against `have`.
void check_stored_size(const TensorValue& t, uint64_t have, const std::string& source, const char* where) {
  const uint64_t want = uint64_t(t.numel()) * value_width(t.data_type);
  if (have != want)
    throw UserError(cat(source, ": tensor '", t.name, "': its ", where, " holds ", have, " bytes; its dims ",
                        shape_str(t.dims), " of type ", onnx_type_name(t.data_type), " take ", want));
}

uint64_t external_number(const TensorValue& t, const std::string& key, const std::string& text, const std::string& source) {
  if (text.empty() || text.size() > 19 || !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw UserError(cat(source, ": tensor '", t.name, "': external data ", key, " '", text, "' is not a byte count"));
  return std::stoull(text);
}

// The checked place of a tensor's external data (ONNX: `location` relative
// to the model's folder, `offset` and `length` in bytes, length defaulting
// to the rest of the file).
StoredBytes external_bytes(const TensorValue& t, const std::map<std::string, std::string>& entries, const ModelFile& file) {
  namespace fs = std::filesystem;
  const std::string& source = file.path;
  auto fail = [&](const std::string& why) -> void {
    throw UserError(cat(source, ": tensor '", t.name, "': ", why));
  };
  auto entry = [&](const char* key) { auto it = entries.find(key); return it == entries.end() ? std::string() : it->second; };
  const std::string location = entry("location");
  if (location.empty()) fail("it keeps its data in an external file but names no location");
  const fs::path relative(location);
  if (relative.is_absolute())
    fail(cat("its external data location '", location, "' is absolute; ONNX locations are relative to the model's folder"));
  for (const fs::path& part : relative)
    if (part == "..") fail(cat("its external data location '", location, "' leaves the model's folder ('..')"));
  const fs::path full = file.folder / relative;
  struct stat st{};
  if (::stat(full.c_str(), &st) != 0)
    fail(cat("cannot open its external data file ", full.string(), ": ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) fail(cat("its external data file ", full.string(), " is not a regular file"));
  std::error_code ec, ec_folder;
  const fs::path folder = fs::canonical(file.folder, ec_folder), target = fs::canonical(full, ec);
  if (ec_folder) ec = ec_folder;
  if (ec) fail(cat("cannot resolve its external data file ", full.string(), ": ", ec.message()));
  if (std::mismatch(folder.begin(), folder.end(), target.begin(), target.end()).first != folder.end())
    fail(cat("its external data file ", full.string(), " leads out of the model's folder (to ", target.string(), ")"));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  StoredBytes b{full.string(), 0, 0};
  if (!entry("offset").empty()) b.offset = external_number(t, "offset", entry("offset"), source);
  if (b.offset > size)
    fail(cat("its external data offset ", b.offset, " lies outside ", full.string(), " (", size, " bytes)"));
  b.length = entry("length").empty() ? size - b.offset : external_number(t, "length", entry("length"), source);
  if (b.length > size - b.offset)
    fail(cat("its external data range [", b.offset, ", ", b.offset + b.length, ") lies outside ", full.string(), " (", size,
             " bytes)"));
  check_stored_size(t, b.length, source, "external data");
  return b;
}

std::string read_range(const StoredBytes& b, const std::string& name);

bool deferrable(const TensorValue& t) {
  return (t.data_type == kFloat || t.data_type == kDouble || t.data_type == kFloat16) && t.numel() >= kDeferredMinElements;
}

// `file`: the model is parsed from this file on disk, and this is a graph
// initializer (its values may be left there).
void parse_tensor(Reader r, TensorValue& t, const ModelFile* file = nullptr) {
  std::string_view raw;
  uint64_t raw_at = 0;
  bool has_raw = false, external = false;
  std::vector<float> doubles;
  std::map<std::string, std::string> external_data;
  while (!r.done()) {
    int w;
    switch (r.key(w)) {
      case 1: r.ints(w, t.dims); break;
      case 2: r.expect(w, 0); t.data_type = static_cast<int32_t>(r.int64()); break;
      case 4: r.floats(w, t.floats); break;
      case 5: r.ints(w, t.ints); break;   // int32_data (also bool, int8, uint8, float16 bits)
      case 7: r.ints(w, t.ints); break;   // int64_data
      case 8: r.expect(w, 2); t.name = r.bytes(); break;
      case 9: r.expect(w, 2); raw = r.view(raw_at); has_raw = true; break;
      case 10: r.doubles(w, doubles); break;
      case 13: {  // external_data: StringStringEntryProto {key, value}
        r.expect(w, 2);
        Reader e = r.sub("StringStringEntryProto");
        std::string key, value;
        while (!e.done()) {
          int ew;
          switch (e.key(ew)) {
            case 1: e.expect(ew, 2); key = e.bytes(); break;
            case 2: e.expect(ew, 2); value = e.bytes(); break;
            default: e.skip(ew);
          }
        }
        external_data[key] = value;
        break;
      }
      case 14: r.expect(w, 0); external = r.int64() == 1; break;
      default: r.skip(w);
    }
  }
  for (int64_t d : t.dims)
    if (d < 0) r.fail(cat("tensor '", t.name, "' has a negative dimension"));
  if (external) {
    if (!file)
      r.fail(cat("tensor '", t.name, "' keeps its data in an external file, which is read only for a graph initializer "
                 "of a model file on disk"));
    if (value_width(t.data_type) == 0)
      r.fail(cat("tensor '", t.name, "' has data type ", onnx_type_name(t.data_type), ", which the importer does not read"));
    StoredBytes b = external_bytes(t, external_data, *file);
    t.floats.clear();
    t.ints.clear();
    if (deferrable(t)) {
      t.stored = std::move(b);
      return;
    }
    decode_raw(t, read_range(b, t.name), r);
  } else if (has_raw) {
    t.floats.clear();
    t.ints.clear();
    if (file && deferrable(t)) {
      check_stored_size(t, raw.size(), file->path, "raw_data");
      t.stored = StoredBytes{file->path, raw_at, raw.size()};
      return;
    }
    decode_raw(t, raw, r);
  } else if (t.data_type == kDouble) {
    t.floats = doubles;
  } else if (t.data_type == kFloat16) {
    for (int64_t bits : t.ints) t.floats.push_back(half_to_float(static_cast<uint16_t>(bits)));
    t.ints.clear();
  }
  const int64_t have = t.is_float() ? static_cast<int64_t>(t.floats.size()) : static_cast<int64_t>(t.ints.size());
  if (have != t.numel()) r.fail(cat("tensor '", t.name, "' has ", have, " values for dims of ", t.numel(), " elements"));
}

TensorValue parse_tensor(Reader r) {
  TensorValue t;
  parse_tensor(r, t);
  return t;
}

Attribute parse_attribute(Reader r) {
  Attribute a;
  while (!r.done()) {
    int w;
    switch (r.key(w)) {
      case 1: r.expect(w, 2); a.name = r.bytes(); break;
      case 2: r.expect(w, 5); a.f = r.float32(); break;
      case 3: r.expect(w, 0); a.i = r.int64(); break;
      case 4: r.expect(w, 2); a.s = r.bytes(); break;
      case 5: r.expect(w, 2); a.t = parse_tensor(r.sub("AttributeProto.t")); break;
      case 7: r.floats(w, a.floats); break;
      case 8: r.ints(w, a.ints); break;
      case 20: r.expect(w, 0); a.type = static_cast<int32_t>(r.int64()); break;
      default: r.skip(w);  // graphs (g), strings, sparse tensors: not used by the ops we import
    }
  }
  return a;
}

void parse_node(Reader r, Node& n) {
  while (!r.done()) {
    int w;
    switch (r.key(w)) {
      case 1: r.expect(w, 2); n.inputs.push_back(r.bytes()); break;
      case 2: r.expect(w, 2); n.outputs.push_back(r.bytes()); break;
      case 3: r.expect(w, 2); n.name = r.bytes(); break;
      case 4: r.expect(w, 2); n.op_type = r.bytes(); break;
      case 5: r.expect(w, 2); n.attributes.push_back(parse_attribute(r.sub("AttributeProto"))); break;
      case 7: r.expect(w, 2); n.domain = r.bytes(); break;
      default: r.skip(w);
    }
  }
}

void parse_shape(Reader r, ValueInfo& v) {
  v.has_shape = true;
  while (!r.done()) {
    int w;
    if (r.key(w) != 1) { r.skip(w); continue; }
    r.expect(w, 2);
    Reader d = r.sub("TensorShapeProto.Dimension");
    int64_t value = -1;
    std::string param;
    while (!d.done()) {
      int dw;
      switch (d.key(dw)) {
        case 1: d.expect(dw, 0); value = d.int64(); break;
        case 2: d.expect(dw, 2); param = d.bytes(); break;
        default: d.skip(dw);
      }
    }
    v.dims.push_back(value);
    v.dim_names.push_back(param);
  }
}

ValueInfo parse_value_info(Reader r) {
  ValueInfo v;
  while (!r.done()) {
    int w;
    switch (r.key(w)) {
      case 1: r.expect(w, 2); v.name = r.bytes(); break;
      case 2: {
        r.expect(w, 2);
        Reader type = r.sub("TypeProto");
        while (!type.done()) {
          int tw;
          if (type.key(tw) != 1) { type.skip(tw); continue; }  // only tensor types
          type.expect(tw, 2);
          Reader tensor = type.sub("TypeProto.Tensor");
          while (!tensor.done()) {
            int xw;
            switch (tensor.key(xw)) {
              case 1: tensor.expect(xw, 0); v.elem_type = static_cast<int32_t>(tensor.int64()); break;
              case 2: tensor.expect(xw, 2); parse_shape(tensor.sub("TensorShapeProto"), v); break;
              default: tensor.skip(xw);
            }
          }
        }
        break;
      }
      default: r.skip(w);
    }
  }
  return v;
}

Graph parse_graph(Reader r, const ModelFile* file) {
  Graph g;
  while (!r.done()) {
    int w;
    switch (r.key(w)) {
      case 1: {
        r.expect(w, 2);
        Node n;
        const bool cut = r.truncated_field();
        try {
          // A node the file ends inside is decoded as far as it goes.
          parse_node(cut ? r.rest("NodeProto (truncated)") : r.sub("NodeProto"), n);
          if (cut) r.fail("the file ends inside this node");
        } catch (const UserError& e) {
          // Name the node as far as it was read: "node 12 'Conv_3' (Conv)".
          const std::string known = !n.op_type.empty() ? " " + n.label()
                                    : !n.outputs.empty() ? cat(" (output '", n.outputs[0], "'; its op not read yet)") : "";
          throw UserError(cat(e.what(), "; in graph node ", g.nodes.size(), known));
        }
        g.nodes.push_back(std::move(n));
        break;
      }
      case 2: r.expect(w, 2); g.name = r.bytes(); break;
      case 5: {
        r.expect(w, 2);
        TensorValue t;
        const bool cut = r.truncated_field();
        const char* begin = r.here();
        try {
          parse_tensor(cut ? r.rest("TensorProto (truncated)") : r.sub("TensorProto"), t, file);
          if (cut) r.fail("the file ends inside this initializer");
        } catch (const UserError& e) {
          throw UserError(cat(e.what(), "; in initializer ", g.initializers.size(), t.name.empty() ? "" : cat(" '", t.name, "'")));
        }
        release_mapped(file, begin, r.here());
        g.initializers.push_back(std::move(t));
        break;
      }
      case 11: r.expect(w, 2); g.inputs.push_back(parse_value_info(r.sub("ValueInfoProto"))); break;
      case 12: r.expect(w, 2); g.outputs.push_back(parse_value_info(r.sub("ValueInfoProto"))); break;
      default: r.skip(w);
    }
  }
  return g;
}

}  // namespace

const char* onnx_type_name(int32_t t) {
  switch (t) {
    case kFloat: return "float";
    case kUint8: return "uint8";
    case kInt8: return "int8";
    case kInt32: return "int32";
    case kInt64: return "int64";
    case kBool: return "bool";
    case kFloat16: return "float16";
    case kDouble: return "double";
    default: return "an unsupported type";
  }
}

int64_t TensorValue::numel() const {
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d != 0 && n > (int64_t(1) << 40) / d) throw UserError(cat("ONNX tensor '", name, "' is implausibly large"));
    n *= d;
  }
  return n;
}

const Attribute* Node::attribute(const std::string& n) const {
  for (const Attribute& a : attributes)
    if (a.name == n) return &a;
  return nullptr;
}
int64_t Node::int_attr(const std::string& n, int64_t fallback) const {
  const Attribute* a = attribute(n);
  return a ? a->i : fallback;
}
float Node::float_attr(const std::string& n, float fallback) const {
  const Attribute* a = attribute(n);
  return a ? a->f : fallback;
}
std::vector<int64_t> Node::ints_attr(const std::string& n) const {
  const Attribute* a = attribute(n);
  return a ? a->ints : std::vector<int64_t>{};
}
std::string Node::label() const { return cat("node '", name.empty() ? outputs.empty() ? "?" : outputs[0] : name, "' (", op_type, ")"); }

namespace {

ModelProto parse_model_bytes(const char* data, size_t size, const std::string& source, const ModelFile* file) {
  ModelProto m;
  Reader r(data, size, 0, &source, "ModelProto");
  bool has_graph = false;
  while (!r.done()) {
    int w;
    switch (r.key(w)) {
      case 1: r.expect(w, 0); m.ir_version = r.int64(); break;
      case 2: r.expect(w, 2); m.producer = r.bytes(); break;
      case 7:
        r.expect(w, 2);
        if (r.truncated_field()) {
          // Decode what is there: the error then names the node or
          // initializer inside which the file ends.
          parse_graph(r.rest("GraphProto (truncated)"), file);
          throw UserError(cat(source, ": the file is truncated: it ends inside the graph, after its last complete node"));
        }
        m.graph = parse_graph(r.sub("GraphProto"), file);
        has_graph = true;
        break;
      case 8: {
        r.expect(w, 2);
        Reader o = r.sub("OperatorSetIdProto");
        std::string domain;
        int64_t version = 0;
        while (!o.done()) {
          int ow;
          switch (o.key(ow)) {
            case 1: o.expect(ow, 2); domain = o.bytes(); break;
            case 2: o.expect(ow, 0); version = o.int64(); break;
            default: o.skip(ow);
          }
        }
        m.opsets[domain == "ai.onnx" ? "" : domain] = version;
        break;
      }
      default: r.skip(w);
    }
  }
  if (!has_graph) throw UserError(cat(source, ": not a valid ONNX file: it holds no graph (truncated, or not an ONNX model?)"));
  return m;
}

// A read-only mapping of a whole file, unmapped when it goes.
struct MappedFile {
  void* data = MAP_FAILED;
  size_t size = 0;
  ~MappedFile() {
    if (data != MAP_FAILED) ::munmap(data, size);
  }
};

}  // namespace

ModelProto parse_model(const std::string& bytes, const std::string& source) {
  return parse_model_bytes(bytes.data(), bytes.size(), source, nullptr);
}

ModelProto read_model_file(const std::string& path) {
  const uint64_t size = checked_input_file(path, "the ONNX model", kMaxModelBytes);
  ModelFile file{path, std::filesystem::path(path).parent_path()};
  if (file.folder.empty()) file.folder = ".";
  MappedFile map;
  map.size = static_cast<size_t>(size);
  const int fd = size ? ::open(path.c_str(), O_RDONLY | O_CLOEXEC) : -1;
  if (fd >= 0) {
    map.data = ::mmap(nullptr, map.size, PROT_READ, MAP_PRIVATE, fd, 0);
    ::close(fd);
    if (map.data != MAP_FAILED) ::madvise(map.data, map.size, MADV_RANDOM);
  }
  if (map.data == MAP_FAILED) {  // empty, or not mappable: read it
    const std::string bytes = read_input_file(path, "the ONNX model", kMaxModelBytes);
    return parse_model_bytes(bytes.data(), bytes.size(), path, &file);
  }
  file.mapped = true;
  return parse_model_bytes(static_cast<const char*>(map.data), map.size, path, &file);
}

namespace {

// Opens a stored tensor's file and checks it still holds the range.
int open_stored(const StoredBytes& b, const std::string& name) {
  const int fd = ::open(b.path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw UserError(cat(b.path, ": cannot open the data of tensor '", name, "': ", std::strerror(errno)));
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || static_cast<uint64_t>(st.st_size) < b.offset ||
      static_cast<uint64_t>(st.st_size) - b.offset < b.length) {
    ::close(fd);
    throw UserError(cat(b.path, ": no longer holds bytes [", b.offset, ", ", b.offset + b.length, ") of tensor '", name,
                        "' (the file changed since the model was read)"));
  }
  return fd;
}

// Reads length bytes at offset into `out`, in pieces (pread may return fewer).
void read_exactly(int fd, const StoredBytes& b, char* out, const std::string& name) {
  uint64_t done = 0;
  while (done < b.length) {
    const size_t piece = static_cast<size_t>(std::min<uint64_t>(b.length - done, uint64_t{1} << 30));
    const ssize_t got = ::pread(fd, out + done, piece, static_cast<off_t>(b.offset + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      const std::string why = got < 0 ? std::strerror(errno) : "the file ended early";
      ::close(fd);
      throw UserError(cat(b.path, ": cannot read the data of tensor '", name, "': ", why));
    }
    done += static_cast<uint64_t>(got);
  }
  ::close(fd);
}

std::string read_range(const StoredBytes& b, const std::string& name) {
  const int fd = open_stored(b, name);
  std::string bytes(static_cast<size_t>(b.length), '\0');
  read_exactly(fd, b, bytes.data(), name);
  return bytes;
}

}  // namespace

void read_stored_values(const TensorValue& t, float* out) {
  PD_CHECK(t.stored.has_value(), "tensor '", t.name, "' is not stored in a file");
  const StoredBytes& b = *t.stored;
  const int fd = open_stored(b, t.name);
  if (t.data_type == kFloat) {  // little-endian float32: straight into place
    read_exactly(fd, b, reinterpret_cast<char*>(out), t.name);
    return;
  }
  // float16 and double: converted a piece at a time.
  const size_t width = value_width(t.data_type);
  constexpr uint64_t kPiece = uint64_t{1} << 20;
  std::string piece;
  for (uint64_t at = 0; at < b.length; at += kPiece) {
    StoredBytes part{b.path, b.offset + at, std::min(kPiece, b.length - at)};
    piece.resize(static_cast<size_t>(part.length));
    read_exactly(::dup(fd), part, piece.data(), t.name);
    for (size_t k = 0; k < piece.size(); k += width, ++out) {
      if (t.data_type == kDouble) {
        double d;
        std::memcpy(&d, piece.data() + k, 8);
        *out = static_cast<float>(d);
      } else {
        uint16_t h;
        std::memcpy(&h, piece.data() + k, 2);
        *out = half_to_float(h);
      }
    }
  }
  ::close(fd);
}

}  // namespace pd::onnx
