#pragma once
// The part of the ONNX protobuf schema the importer reads (ModelProto,
// GraphProto, NodeProto, AttributeProto, TensorProto, ValueInfoProto),
// decoded by a small hand-written protobuf wire-format reader. Every length
// and offset is checked against the buffer, so a truncated or corrupted file
// is a UserError naming the message and byte offset, never a crash. Unknown
// fields are skipped, as protobuf requires.
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace pd::onnx {

// ONNX TensorProto.DataType values we meet.
enum OnnxType : int32_t {
  kUndefined = 0, kFloat = 1, kUint8 = 2, kInt8 = 3, kInt32 = 6, kInt64 = 7,
  kBool = 9, kFloat16 = 10, kDouble = 11,
};
const char* onnx_type_name(int32_t t);

// Where the values of a tensor the parser did not decode are: a byte range
// of the model file (an initializer's raw_data) or of an external data file
// (checked when parsed: inside the model's folder, a regular file, the
// range inside it and exactly the tensor's bytes).
struct StoredBytes {
  std::string path;
  uint64_t offset = 0, length = 0;
};

// A constant tensor: values as floats (weights) or integers (shapes, ids).
// A large float initializer read from a file is not decoded at parse time:
// `stored` says where its bytes are and read_stored_values() reads them,
// so only a process that builds the layer holding it reads them.
struct TensorValue {
  std::string name;
  std::vector<int64_t> dims;
  int32_t data_type = kUndefined;
  std::vector<float> floats;   // data_type float (and float16/double, converted)
  std::vector<int64_t> ints;   // integer and bool types
  std::optional<StoredBytes> stored;  // set: floats is empty, the values are there
  bool is_float() const { return data_type == kFloat || data_type == kDouble || data_type == kFloat16; }
  int64_t numel() const;
};

// Float initializers of at least this many elements read from a file are
// left in it until a layer needs them (smaller ones are decoded: scalars
// and tables an op may read at import).
constexpr int64_t kDeferredMinElements = 4096;

// Reads a deferred float tensor's values (converted to float32) into
// out[0, numel). UserError, naming the tensor, if the file changed since.
void read_stored_values(const TensorValue& t, float* out);

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
// (larger models keep their weights in external data files, next to it).
constexpr uint64_t kMaxModelBytes = uint64_t{2} << 30;
// Decodes a model file (UserError when missing, not a regular file, larger
// than kMaxModelBytes or malformed). The file is mapped, not read: large
// float initializers, embedded (raw_data) or in external data files, are
// left where they are (TensorValue::stored), so the parse touches only the
// graph's structure. External data (`location`, `offset`, `length`) is
// read relative to the model's folder; refused, naming the tensor: an
// absolute location, one leaving the folder (`..` or a symlink out), a
// file that is not regular, a range outside the file or of the wrong size.
ModelProto read_model_file(const std::string& path);

}  // namespace pd::onnx
