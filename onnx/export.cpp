#include "onnx/export.h"

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <map>
#include <set>
#include <string_view>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/input_file.h"
#include "models/parameters.h"
#include "onnx/import.h"
#include "onnx/onnx_proto.h"

namespace pd::onnx {

namespace {

// Field numbers of the ONNX messages on the path to an initializer's data.
constexpr uint32_t kModelGraph = 7;        // ModelProto.graph
constexpr uint32_t kGraphInitializer = 5;  // GraphProto.initializer
constexpr uint32_t kTensorFloatData = 4, kTensorName = 8, kTensorRawData = 9, kTensorDoubleData = 10;
constexpr uint32_t kTensorExternalData = 13, kTensorDataLocation = 14;  // TensorProto
constexpr uint32_t kEntryKey = 1, kEntryValue = 2;                      // StringStringEntryProto
constexpr uint64_t kDataLocationExternal = 1;                           // TensorProto.DataLocation.EXTERNAL
// Offsets of tensors in a written external data file are multiples of this
// (so that a reader mapping the file finds each tensor aligned).
constexpr uint64_t kExternalAlignment = 64;
// Protobuf wire types.
constexpr int kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

// One field of a serialized message: bytes [begin, end) of the message hold
// its key and value; `payload` is the content of a length-delimited one.
struct Field {
  uint32_t number = 0;
  int wire = 0;
  size_t begin = 0, end = 0;
  std::string_view payload;
};

// Walks the fields of one message. parse_model has decoded the file before,
// yet every length is checked again so that this walk can never read past
// the buffer whatever it is given.
class FieldScanner {
 public:
  explicit FieldScanner(std::string_view msg) : msg_(msg) {}

  bool next(Field& f) {
    if (pos_ >= msg_.size()) return false;
    f.begin = pos_;
    const uint64_t key = varint();
    f.number = static_cast<uint32_t>(key >> 3);
    f.wire = static_cast<int>(key & 7);
    f.payload = {};
    switch (f.wire) {
      case kVarint: varint(); break;
      case kFixed64: advance(8); break;
      case kFixed32: advance(4); break;
      case kLengthDelimited: {
        const uint64_t n = varint();
        const size_t at = pos_;
        advance(n);
        f.payload = msg_.substr(at, static_cast<size_t>(n));
        break;
      }
      default: throw UserError(cat("unsupported protobuf wire type ", f.wire, " at byte ", f.begin));
    }
    f.end = pos_;
    return true;
  }

 private:
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= msg_.size()) throw UserError(cat("truncated protobuf varint at byte ", pos_));
      const auto b = static_cast<uint8_t>(msg_[pos_++]);
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    throw UserError(cat("protobuf varint longer than 10 bytes at byte ", pos_));
  }
  void advance(uint64_t n) {
    if (n > msg_.size() - pos_) throw UserError(cat("protobuf field runs past its message at byte ", pos_));
    pos_ += static_cast<size_t>(n);
  }

  std::string_view msg_;
  size_t pos_ = 0;
};

void put_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

void put_bytes_field(std::string& out, uint32_t number, std::string_view payload) {
  put_varint(out, uint64_t(number) << 3 | kLengthDelimited);
  put_varint(out, payload.size());
  out.append(payload);
}

// `msg` with the payload of every length-delimited field `number` replaced
// by rewrite(payload) (its length prefix recomputed); all other fields are
// copied byte for byte.
std::string rewrite_fields(std::string_view msg, uint32_t number,
                           const std::function<std::string(std::string_view)>& rewrite) {
  std::string out;
  out.reserve(msg.size());
  FieldScanner s(msg);
  Field f;
  while (s.next(f)) {
    if (f.number == number && f.wire == kLengthDelimited)
      put_bytes_field(out, number, rewrite(f.payload));
    else
      out.append(msg.substr(f.begin, f.end - f.begin));
  }
  return out;
}

// The new value of one initializer, and the ONNX type to store it as.
struct Replacement {
  const Tensor* value = nullptr;
  int32_t data_type = kFloat;
};

size_t raw_data_bytes(const Replacement& r) {
  return static_cast<size_t>(r.value->numel()) * (r.data_type == kFloat ? sizeof(float) : sizeof(double));
}

std::string raw_data(const Replacement& r) {
  const float* v = r.value->f32();
  const size_t n = static_cast<size_t>(r.value->numel());
  if (r.data_type == kFloat) return std::string(reinterpret_cast<const char*>(v), n * sizeof(float));
  std::string out(n * sizeof(double), '\0');  // kDouble: the importer read it as float
  for (size_t i = 0; i < n; ++i) {
    const double d = v[i];
    std::memcpy(out.data() + i * sizeof(double), &d, sizeof(double));
  }
  return out;
}

// The external data file export lays out (ONNX: `location` relative to
// the model's folder, `offset`, `length`): each replaced tensor's bytes in
// the order the graph lists them, at aligned offsets.
struct ExternalLayout {
  std::string location;  // the data file's name, beside the model
  uint64_t size = 0;
  std::vector<std::pair<uint64_t, Replacement>> tensors;  // offset, value
};

void put_entry(std::string& out, const std::string& key, const std::string& value) {
  std::string entry;
  put_bytes_field(entry, kEntryKey, key);
  put_bytes_field(entry, kEntryValue, value);
  put_bytes_field(out, kTensorExternalData, entry);
}

// A TensorProto with its data replaced when its name is in `values`: the
// old data fields (float_data, double_data, raw_data, external data)
// dropped, the new values appended as raw_data or, with `external`, as
// external data entries pointing into its file; name, dims, type and the
// rest kept.
std::string rewrite_tensor(std::string_view tensor, const std::map<std::string, Replacement>& values,
                           ExternalLayout* external) {
  FieldScanner s(tensor);
  Field f;
  std::string name;
  while (s.next(f))
    if (f.number == kTensorName && f.wire == kLengthDelimited) name = std::string(f.payload);
  auto it = values.find(name);
  if (it == values.end()) return std::string(tensor);
  std::string out;
  FieldScanner again(tensor);
  while (again.next(f)) {
    const bool data = f.number == kTensorFloatData || f.number == kTensorRawData || f.number == kTensorDoubleData ||
                      f.number == kTensorExternalData || f.number == kTensorDataLocation;
    if (!data) out.append(tensor.substr(f.begin, f.end - f.begin));
  }
  if (!external) {
    put_bytes_field(out, kTensorRawData, raw_data(it->second));
    return out;
  }
  const uint64_t offset = (external->size + kExternalAlignment - 1) / kExternalAlignment * kExternalAlignment;
  const uint64_t length = raw_data_bytes(it->second);
  external->tensors.emplace_back(offset, it->second);
  external->size = offset + length;
  put_entry(out, "location", external->location);
  put_entry(out, "offset", std::to_string(offset));
  put_entry(out, "length", std::to_string(length));
  put_varint(out, uint64_t(kTensorDataLocation) << 3 | kVarint);
  put_varint(out, kDataLocationExternal);
  return out;
}

// Writes the laid-out tensors (zeros between them) to `path`, atomically.
void write_external_data(const std::string& path, const ExternalLayout& layout) {
  write_file_atomically(path, [&](std::FILE* f) {
    static const char zeros[kExternalAlignment] = {};
    uint64_t at = 0;
    for (const auto& [offset, r] : layout.tensors) {
      if (offset > at && std::fwrite(zeros, 1, offset - at, f) != offset - at) return false;
      const std::string bytes = raw_data(r);
      if (std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size()) return false;
      at = offset + bytes.size();
    }
    return true;
  });
}

// Each parameter and buffer of the imported model: its stored name
// ("4.conv1.weight") -> its initializer's name ("conv1.weight").
std::map<std::string, std::string> stored_names(const Model& m) {
  std::map<std::string, std::string> out;
  for (int i = 0; i < m.size(); ++i) {
    const Layer& l = m.layer(i);
    for (const ParamSpec& p : l.param_specs()) out[stored_tensor_name(i, p.name)] = p.name;
    for (const ParamSpec& b : l.buffer_specs()) out[stored_tensor_name(i, b.name)] = b.name;
  }
  return out;
}

// Checkpoint tensors that are not weights: optimizer slots and older
// weight versions (runtime/checkpoint.h).
bool is_optimizer_slot(const std::string& name) {
  return name.rfind("optimizer.", 0) == 0 || name.rfind("version.", 0) == 0;
}

// The initializer a stored tensor holds: "4.conv1.weight" -> "conv1.weight".
// Its layer index is not compared: a run of a graph plan has one layer per
// stage (runtime/graph_stages.h), so its files number layers by stage.
std::string initializer_of(const std::string& stored) {
  size_t k = 0;
  while (k < stored.size() && std::isdigit(static_cast<unsigned char>(stored[k]))) ++k;
  return k > 0 && k < stored.size() && stored[k] == '.' ? stored.substr(k + 1) : stored;
}

struct StoredTensor {
  std::string name;  // as stored
  const Tensor* tensor = nullptr;
};

// The weights by initializer name; a tensor that is no initializer of the
// model, or one given twice, is a UserError.
std::map<std::string, StoredTensor> weights_by_initializer(const NamedTensors& weights,
                                                           const std::map<std::string, std::string>& expected,
                                                           const std::string& source, const std::string& weights_source) {
  std::set<std::string> initializers;
  for (const auto& [stored, onnx_name] : expected) initializers.insert(onnx_name);
  std::map<std::string, StoredTensor> out;
  for (const auto& [name, t] : weights) {
    if (is_optimizer_slot(name)) continue;
    const std::string init = initializer_of(name);
    if (!initializers.count(init))
      throw UserError(cat(weights_source, ": tensor '", name, "' is not a parameter or buffer of ", source,
                          " (weights of another model?)"));
    auto [it, added] = out.emplace(init, StoredTensor{name, &t});
    if (!added)
      throw UserError(cat(weights_source, ": tensors '", it->second.name, "' and '", name, "' both hold initializer '",
                          init, "'"));
  }
  return out;
}

Replacement checked_replacement(const std::string& stored, const Tensor& t, const TensorValue& init,
                                const std::string& weights_source) {
  if (t.dtype() != DType::F32 || t.shape() != init.dims)
    throw UserError(cat(weights_source, ": tensor '", stored, "' is ", shape_str(t.shape()), " ",
                        dtype_name(t.dtype()), ", initializer '", init.name, "' is ", shape_str(init.dims), " ",
                        onnx_type_name(init.data_type)));
  if (init.data_type != kFloat && init.data_type != kDouble)
    throw UserError(cat("initializer '", init.name, "' is ", onnx_type_name(init.data_type),
                        "; export writes float and double initializers only"));
  return {&t, init.data_type};
}

// Initializer name -> its new value, after checking that `weights` holds
// exactly the model's tensors with the initializers' shapes.
std::map<std::string, Replacement> match_weights(const ModelProto& proto, const Model& model,
                                                 const NamedTensors& weights, const std::string& source,
                                                 const std::string& weights_source) {
  const std::map<std::string, std::string> expected = stored_names(model);
  const std::map<std::string, StoredTensor> given = weights_by_initializer(weights, expected, source, weights_source);
  std::map<std::string, const TensorValue*> inits;
  for (const TensorValue& t : proto.graph.initializers) inits[t.name] = &t;
  std::map<std::string, Replacement> out;
  for (const auto& [stored, onnx_name] : expected) {
    auto w = given.find(onnx_name);
    if (w == given.end())
      throw UserError(cat(weights_source, " has no tensor '", stored, "' (initializer '", onnx_name, "' of ", source,
                          ")"));
    auto init = inits.find(onnx_name);
    PD_CHECK(init != inits.end(), "imported tensor '", onnx_name, "' is no initializer of ", source);
    out[onnx_name] = checked_replacement(w->second.name, *w->second.tensor, *init->second, weights_source);
  }
  return out;
}

std::string read_bytes(const std::string& path) {
  return read_input_file(path, "the ONNX model", kMaxModelBytes);
}

// `onnx_bytes` (parsed as `proto`) with the weights written in, embedded or
// (with `external`) laid out for an external data file.
std::string rewrite_model(const std::string& onnx_bytes, const ModelProto& proto, const std::string& source,
                          const NamedTensors& weights, const std::string& weights_source, ExternalLayout* external) {
  const Model model = import_model(proto, std::filesystem::path(source).stem().string());
  const std::map<std::string, Replacement> values = match_weights(proto, model, weights, source, weights_source);
  return rewrite_fields(onnx_bytes, kModelGraph, [&](std::string_view graph) {
    return rewrite_fields(graph, kGraphInitializer,
                          [&](std::string_view t) { return rewrite_tensor(t, values, external); });
  });
}

}  // namespace

std::string export_weights(const std::string& onnx_bytes, const std::string& source, const NamedTensors& weights,
                           const std::string& weights_source) {
  return rewrite_model(onnx_bytes, parse_model(onnx_bytes, source), source, weights, weights_source, nullptr);
}

std::string external_data_file_name(const std::string& out_path) {
  return std::filesystem::path(out_path).filename().string() + ".data";
}

ExportLayout export_model_file(const std::string& onnx_path, const std::vector<std::string>& weight_paths,
                               const std::string& out_path, ExportLayout layout) {
  const WeightFiles weights = read_weight_files(weight_paths);
  const std::string bytes = read_bytes(onnx_path);
  const ModelProto proto = read_model_file(onnx_path);  // external data of the input resolved in its folder
  if (layout == ExportLayout::automatic) {
    uint64_t total = bytes.size();
    for (const auto& [name, t] : weights.tensors) total += t.nbytes();
    layout = total >= kMaxModelBytes ? ExportLayout::external : ExportLayout::embedded;
  }
  if (layout == ExportLayout::embedded) {
    write_file_atomically(out_path, rewrite_model(bytes, proto, onnx_path, weights.tensors, weights.source, nullptr));
    return layout;
  }
  ExternalLayout external;
  external.location = external_data_file_name(out_path);
  const std::string model = rewrite_model(bytes, proto, onnx_path, weights.tensors, weights.source, &external);
  const std::filesystem::path folder = std::filesystem::path(out_path).parent_path();
  write_external_data((folder / external.location).string(), external);  // before the model that names it
  write_file_atomically(out_path, model);
  return layout;
}

}  // namespace pd::onnx
