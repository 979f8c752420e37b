#pragma once
// A protobuf encoder for the importer's ONNX structs (tests only): builds
// small models in the test - valid ones, and broken ones by editing them -
// without PyTorch.
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>

#include "onnx/onnx_proto.h"

namespace pd::onnx::testing {

class Writer {
 public:
  std::string bytes;
  void varint(uint64_t v) {
    while (v >= 0x80) {
      bytes.push_back(static_cast<char>((v & 0x7f) | 0x80));
      v >>= 7;
    }
    bytes.push_back(static_cast<char>(v));
  }
  void key(int field, int wire) { varint(static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire)); }
  void integer(int field, int64_t v) {
    key(field, 0);
    varint(static_cast<uint64_t>(v));
  }
  void str(int field, const std::string& s) {
    key(field, 2);
    varint(s.size());
    bytes += s;
  }
  void f32(int field, float f) {
    key(field, 5);
    char b[4];
    std::memcpy(b, &f, 4);
    bytes.append(b, 4);
  }
};

inline std::string encode(const TensorValue& t) {
  Writer w;
  for (int64_t d : t.dims) w.integer(1, d);
  w.integer(2, t.data_type);
  w.str(8, t.name);
  std::string raw;
  if (t.data_type == kFloat) {
    raw.resize(t.floats.size() * 4);
    std::memcpy(raw.data(), t.floats.data(), raw.size());
  } else {
    raw.resize(t.ints.size() * 8);
    std::memcpy(raw.data(), t.ints.data(), raw.size());
  }
  w.str(9, raw);
  return w.bytes;
}

inline std::string encode(const Attribute& a) {
  Writer w;
  w.str(1, a.name);
  switch (a.type) {
    case 1: w.f32(2, a.f); break;
    case 2: w.integer(3, a.i); break;
    case 3: w.str(4, a.s); break;
    case 4: w.str(5, encode(a.t)); break;
    case 7: for (int64_t v : a.ints) w.integer(8, v); break;
    default: break;
  }
  w.integer(20, a.type);
  return w.bytes;
}

inline std::string encode(const Node& n) {
  Writer w;
  for (const std::string& s : n.inputs) w.str(1, s);
  for (const std::string& s : n.outputs) w.str(2, s);
  w.str(3, n.name);
  w.str(4, n.op_type);
  for (const Attribute& a : n.attributes) w.str(5, encode(a));
  return w.bytes;
}

inline std::string encode(const ValueInfo& v) {
  Writer shape;
  for (size_t d = 0; d < v.dims.size(); ++d) {
    Writer dim;
    if (v.dims[d] >= 0)
      dim.integer(1, v.dims[d]);
    else
      dim.str(2, d < v.dim_names.size() ? v.dim_names[d] : "N");
    shape.str(1, dim.bytes);
  }
  Writer tensor;
  tensor.integer(1, v.elem_type);
  tensor.str(2, shape.bytes);
  Writer type;
  type.str(1, tensor.bytes);
  Writer w;
  w.str(1, v.name);
  w.str(2, type.bytes);
  return w.bytes;
}

// The model, each initializer written by `initializer` (default: inline,
// as encode(TensorValue) does; external_data_test moves some to a file).
inline std::string encode(const ModelProto& m,
                          const std::function<std::string(const TensorValue&)>& initializer = nullptr) {
  Writer g;
  for (const Node& n : m.graph.nodes) g.str(1, encode(n));
  g.str(2, m.graph.name);
  for (const TensorValue& t : m.graph.initializers) g.str(5, initializer ? initializer(t) : encode(t));
  for (const ValueInfo& v : m.graph.inputs) g.str(11, encode(v));
  for (const ValueInfo& v : m.graph.outputs) g.str(12, encode(v));
  Writer w;
  w.integer(1, m.ir_version);
  w.str(2, m.producer);
  w.str(7, g.bytes);
  for (const auto& [domain, version] : m.opsets) {
    Writer o;
    o.str(1, domain);
    o.integer(2, version);
    w.str(8, o.bytes);
  }
  return w.bytes;
}

inline TensorValue float_tensor(const std::string& name, std::vector<int64_t> dims, float scale = 0.1f) {
  TensorValue t;
  t.name = name;
  t.dims = std::move(dims);
  t.data_type = kFloat;
  for (int64_t i = 0; i < t.numel(); ++i) t.floats.push_back(scale * static_cast<float>((i * 7919) % 13 - 6) / 6.0f);
  return t;
}

// Attributes by ONNX type number: 1 float, 2 int, 7 ints.
inline Attribute float_attribute(const std::string& name, float v) {
  Attribute a;
  a.name = name;
  a.type = 1;
  a.f = v;
  return a;
}

inline Attribute int_attribute(const std::string& name, int64_t v) {
  Attribute a;
  a.name = name;
  a.type = 2;
  a.i = v;
  return a;
}

inline Attribute ints_attribute(const std::string& name, std::vector<int64_t> v) {
  Attribute a;
  a.name = name;
  a.type = 7;
  a.ints = std::move(v);
  return a;
}

inline Node make_node(std::string name, std::string op, std::vector<std::string> in, std::vector<std::string> out) {
  Node n;
  n.name = std::move(name);
  n.op_type = std::move(op);
  n.inputs = std::move(in);
  n.outputs = std::move(out);
  return n;
}

// x [4, 2, 6, 6] -> Conv(3x3, pad 1) -> Relu -> Add(residual x') ... ->
// Flatten -> Gemm -> logits [4, 5]: small, with a skip connection.
inline ModelProto small_model() {
  ModelProto m;
  m.ir_version = 8;
  m.producer = "pipedream-test";
  m.opsets[""] = 17;
  Graph& g = m.graph;
  g.name = "small";
  ValueInfo in;
  in.name = "x";
  in.elem_type = kFloat;
  in.dims = {4, 2, 6, 6};
  in.dim_names = {"", "", "", ""};
  in.has_shape = true;
  g.inputs.push_back(in);
  ValueInfo out;
  out.name = "logits";
  out.elem_type = kFloat;
  g.outputs.push_back(out);
  g.initializers = {float_tensor("conv.weight", {2, 2, 3, 3}), float_tensor("conv.bias", {2}),
                    float_tensor("fc.weight", {5, 72}), float_tensor("fc.bias", {5})};
  Node conv = make_node("conv", "Conv", {"x", "conv.weight", "conv.bias"}, {"c"});
  conv.attributes = {ints_attribute("kernel_shape", {3, 3}), ints_attribute("pads", {1, 1, 1, 1})};
  Node gemm = make_node("fc", "Gemm", {"f", "fc.weight", "fc.bias"}, {"logits"});
  gemm.attributes = {int_attribute("transB", 1)};
  g.nodes = {conv, make_node("relu", "Relu", {"c"}, {"r"}), make_node("residual", "Add", {"r", "x"}, {"s"}),
             make_node("flatten", "Flatten", {"s"}, {"f"}), gemm};
  return m;
}

}  // namespace pd::onnx::testing
