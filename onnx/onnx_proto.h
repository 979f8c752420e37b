#pragma once
// The part of the ONNX protobuf schema the importer reads (ModelProto,
// GraphProto, NodeProto, AttributeProto, TensorProto, ValueInfoProto),
// decoded by a small hand-written protobuf wire-format reader. Every length
// and offset is checked against the buffer, so a truncated or corrupted file
// is a UserError naming the message and byte offset, never a crash. Unknown
// fields are skipped, as protobuf requires.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pd::onnx {

// ONNX TensorProto.DataType values we meet.
enum OnnxType : int32_t {
  kUndefined = 0, kFloat = 1, kUint8 = 2, kInt8 = 3, kInt32 = 6, kInt64 = 7,
  kBool = 9, kFloat16 = 10, kDouble = 11,
};
const char* onnx_type_name(int32_t t);

// A constant tensor: values as doubles (weights, small integer shapes;
// int64 fits exactly up to 2^53, far beyond any shape).
struct TensorValue {
  std::string name;
  std::vector<int64_t> dims;
  int32_t data_type = kUndefined;
  std::vector<float> floats;   // data_type float (and float16/double, converted)
  std::vector<int64_t> ints;   // integer and bool types
  bool is_float() const { return data_type == kFloat || data_type == kDouble || data_type == kFloat16; }
  int64_t numel() const;
};

struct Attribute {
  std::string name;
  int32_t type = 0;  // AttributeProto.AttributeType: 1 float, 2 int, 3 string, 4 tensor, 6 floats, 7 ints
  float f = 0;
  int64_t i = 0;
  std::string s;
  TensorValue t;
  std::vector<float> floats;
  std::vector<int64_t> ints;
};

struct Node {
  std::string name, op_type, domain;
  std::vector<std::string> inputs, outputs;  // "" = an omitted optional input
  std::vector<Attribute> attributes;
  const Attribute* attribute(const std::string& n) const;
  int64_t int_attr(const std::string& n, int64_t fallback) const;
  float float_attr(const std::string& n, float fallback) const;
  std::vector<int64_t> ints_attr(const std::string& n) const;  // empty when absent
  std::string label() const;  // "node 'Conv_3' (Conv)" for messages
};

// A graph input or output: element type and shape. A dimension given by a
// name (dim_param) or left unknown is -1.
struct ValueInfo {
  std::string name;
  int32_t elem_type = kUndefined;
  std::vector<int64_t> dims;
  std::vector<std::string> dim_names;  // the dim_param per dimension, "" when fixed
  bool has_shape = false;
};

struct Graph {
  std::string name;
  std::vector<Node> nodes;
  std::vector<TensorValue> initializers;
  std::vector<ValueInfo> inputs, outputs;
};

struct ModelProto {
  int64_t ir_version = 0;
  std::map<std::string, int64_t> opsets;  // domain ("" = ai.onnx) -> version
  std::string producer;
  Graph graph;
};

// Decodes a serialized ModelProto (UserError on malformed bytes; `source`
// names the file in messages).
ModelProto parse_model(const std::string& bytes, const std::string& source);
// Largest ONNX file read: 2 GiB, protobuf's own limit on one message
// (larger models keep their weights in external data, which is not read).
constexpr uint64_t kMaxModelBytes = uint64_t{2} << 30;
// Reads and decodes a file (UserError when missing, not a regular file,
// larger than kMaxModelBytes or malformed).
ModelProto read_model_file(const std::string& path);

}  // namespace pd::onnx
