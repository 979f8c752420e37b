#include "onnx/onnx_proto.h"

#include <cstring>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/input_file.h"

namespace pd::onnx {

namespace {

// One protobuf message's bytes: a cursor that refuses to read past its end.
// Wire types: 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32.
class Reader {
 public:
  Reader(const char* begin, size_t size, size_t base, const std::string* source, const char* what)
      : p_(reinterpret_cast<const uint8_t*>(begin)), size_(size), base_(base), source_(source), what_(what) {}

  bool done() const { return pos_ >= size_; }

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
void decode_raw(TensorValue& t, const std::string& raw, Reader& r) {
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

void parse_tensor(Reader r, TensorValue& t) {
  std::string raw;
  bool has_raw = false, external = false;
  std::vector<float> doubles;
  while (!r.done()) {
    int w;
    switch (r.key(w)) {
      case 1: r.ints(w, t.dims); break;
      case 2: r.expect(w, 0); t.data_type = static_cast<int32_t>(r.int64()); break;
      case 4: r.floats(w, t.floats); break;
      case 5: r.ints(w, t.ints); break;   // int32_data (also bool, int8, uint8, float16 bits)
      case 7: r.ints(w, t.ints); break;   // int64_data
      case 8: r.expect(w, 2); t.name = r.bytes(); break;
      case 9: r.expect(w, 2); raw = r.bytes(); has_raw = true; break;
      case 10: r.doubles(w, doubles); break;
      case 14: r.expect(w, 0); external = r.int64() == 1; break;
      default: r.skip(w);
    }
  }
  if (external) r.fail(cat("tensor '", t.name, "' keeps its data in an external file, which the importer does not read (export without external data)"));
  for (int64_t d : t.dims)
    if (d < 0) r.fail(cat("tensor '", t.name, "' has a negative dimension"));
  if (has_raw) {
    t.floats.clear();
    t.ints.clear();
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

Graph parse_graph(Reader r) {
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
        try {
          parse_tensor(cut ? r.rest("TensorProto (truncated)") : r.sub("TensorProto"), t);
          if (cut) r.fail("the file ends inside this initializer");
        } catch (const UserError& e) {
          throw UserError(cat(e.what(), "; in initializer ", g.initializers.size(), t.name.empty() ? "" : cat(" '", t.name, "'")));
        }
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

ModelProto parse_model(const std::string& bytes, const std::string& source) {
  ModelProto m;
  Reader r(bytes.data(), bytes.size(), 0, &source, "ModelProto");
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
          parse_graph(r.rest("GraphProto (truncated)"));
          throw UserError(cat(source, ": the file is truncated: it ends inside the graph, after its last complete node"));
        }
        m.graph = parse_graph(r.sub("GraphProto"));
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

ModelProto read_model_file(const std::string& path) {
  return parse_model(read_input_file(path, "the ONNX model", kMaxModelBytes), path);
}

}  // namespace pd::onnx
