// Building a Model from its JSON spec. Every field is checked here, before
// any layer is constructed, so that a mistake is reported as
// "layer I (type): field 'F' ..." rather than as a failure deep in a kernel.
#include <algorithm>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "core/checked.h"
#include "core/error.h"
#include "core/input_file.h"
#include "core/layers.h"
#include "models/model.h"

namespace pd {

namespace {
// " (did you mean 'x'?)": the known field nearest a misspelt one.
std::string nearest(const std::string& key, const std::set<std::string>& known) {
  std::string best;
  size_t distance = SIZE_MAX;
  for (const std::string& k : known)
    if (const size_t d = checked::edit_distance(key, k); d < distance) distance = d, best = k;
  return best.empty() ? std::string() : cat(" (did you mean '", best, "'?)");
}

using nlohmann::json;

// Largest size (a dimension, a channel count, a kernel) and largest tensor
// (per-sample activation or parameter, in elements) a spec may ask for:
// 2^31 - 1, what the kernels index with. Larger values are typos, and
// would overflow shape arithmetic or exhaust memory before any message.
constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();
constexpr int64_t kMaxElements = std::numeric_limits<int32_t>::max();

// Elements of `shape`, or a UserError from `f` when there are too many.
int64_t checked_numel(const Shape& shape, const checked::Field& f) {
  int64_t n = 1;
  for (int64_t d : shape) n = checked::product(n, d, f, kMaxElements);
  return n;
}

// Reads the fields of one layer object; remembers which it used so that a
// misspelt field ("kernal") is an error, not a silent default.
class LayerFields {
 public:
  LayerFields(const json& j, int index, std::string type) : j_(j), index_(index), type_(std::move(type)) {
    used_ = {"type", "name"};
  }

  checked::Field field(const std::string& name) const {
    return {cat("model spec: layer ", index_, " (", type_, ")"), cat("field '", name, "'")};
  }
  UserError error(const std::string& field, const std::string& what) const {
    return UserError(cat("model spec: layer ", index_, " (", type_, "): field '", field, "' ", what));
  }
  UserError error(const std::string& what) const {
    return UserError(cat("model spec: layer ", index_, " (", type_, "): ", what));
  }

  // Sizes are at most kMaxSize, so that they fit an int and sums of a few
  // of them fit an int64_t.
  int64_t integer(const std::string& f, std::optional<int64_t> fallback, int64_t min) {
    used_.insert(f);
    if (!j_.contains(f)) {
      if (!fallback) throw error(f, "is required");
      return *fallback;
    }
    return checked::integer(j_[f], field(f), min, kMaxSize);
  }

  double number(const std::string& f, double fallback, double lo, double hi) {
    used_.insert(f);
    if (!j_.contains(f)) return fallback;
    return checked::number(j_[f], field(f), lo, hi);
  }

  bool flag(const std::string& f, bool fallback) {
    used_.insert(f);
    if (!j_.contains(f)) return fallback;
    if (!j_[f].is_boolean()) throw error(f, cat("must be true or false, got ", j_[f].dump()));
    return j_[f].get<bool>();
  }

  // adaptive pooling output: an integer or [h, w].
  std::pair<int64_t, int64_t> size2(const std::string& f) {
    used_.insert(f);
    if (!j_.contains(f)) throw error(f, "is required");
    const json& v = j_[f];
    if (v.is_number()) {
      const int64_t n = checked::integer(v, field(f), 1, kMaxSize);
      return {n, n};
    }
    if (v.is_array() && v.size() == 2)
      return {checked::integer(v[0], field(f + "[0]"), 1, kMaxSize),
              checked::integer(v[1], field(f + "[1]"), 1, kMaxSize)};
    throw error(f, cat("must be a positive integer or [h, w], got ", v.dump()));
  }

  void reject_unknown() const {
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!used_.count(it.key())) throw error(it.key(), cat("is not a field of this layer type", nearest(it.key(), used_)));
  }

 private:
  const json& j_;
  int index_;
  std::string type_;
  std::set<std::string> used_;
};

void need_rank(const LayerFields& lf, const Shape& in, size_t rank, const char* layout) {
  if (in.size() != rank)
    throw lf.error(cat("needs a ", layout, " input, but its input is ", shape_str(in)));
}

// ---- Layer types --------------------------------------------------------
// One builder per layer type: reads the layer's fields (checked) and
// constructs it for the per-sample input shape.
using LayerBuilder = LayerPtr (*)(const std::string& type, LayerFields& f, const Shape& in);

LayerPtr build_linear(const std::string&, LayerFields& f, const Shape& in) {
  if (in.empty()) throw f.error("needs an input with at least one dimension");
  return make_linear(in.back(), f.integer("out_features", std::nullopt, 1), f.flag("bias", true));
}

LayerPtr build_conv2d(const std::string&, LayerFields& f, const Shape& in) {
  need_rank(f, in, 3, "[C, H, W]");
  int64_t out = f.integer("out_channels", std::nullopt, 1);
  // int64_t: 2 * padding must not overflow; each fits an int (kMaxSize).
  const int64_t k = f.integer("kernel", std::nullopt, 1);
  const int64_t s = f.integer("stride", 1, 1);
  const int64_t p = f.integer("padding", 0, 0);
  if (in[1] + 2 * p < k || in[2] + 2 * p < k)
    throw f.error("kernel", cat("(", k, ") is larger than the padded input ", shape_str(in)));
  return make_conv2d(in[0], out, static_cast<int>(k), static_cast<int>(s), static_cast<int>(p), f.flag("bias", true));
}

LayerPtr build_pool2d(const std::string& type, LayerFields& f, const Shape& in) {
  need_rank(f, in, 3, "[C, H, W]");
  const int64_t k = f.integer("kernel", std::nullopt, 1);
  const int s = static_cast<int>(f.integer("stride", k, 1));
  const int64_t p = f.integer("padding", 0, 0);
  if (2 * p > k) throw f.error("padding", cat("(", p, ") must be at most half the kernel (", k, ")"));
  if (in[1] + 2 * p < k || in[2] + 2 * p < k)
    throw f.error("kernel", cat("(", k, ") is larger than the padded input ", shape_str(in)));
  const int ki = static_cast<int>(k), pi = static_cast<int>(p);
  return type == "maxpool2d" ? make_maxpool2d(ki, s, pi) : make_avgpool2d(ki, s, pi);
}

LayerPtr build_adaptive_avgpool2d(const std::string&, LayerFields& f, const Shape& in) {
  need_rank(f, in, 3, "[C, H, W]");
  auto [h, w] = f.size2("output_size");
  return make_adaptive_avgpool2d(static_cast<int>(h), static_cast<int>(w));
}

LayerPtr build_relu(const std::string&, LayerFields&, const Shape&) { return make_relu(); }
LayerPtr build_gelu(const std::string&, LayerFields&, const Shape&) { return make_gelu(); }
LayerPtr build_flatten(const std::string&, LayerFields&, const Shape&) { return make_flatten(); }

LayerPtr build_dropout(const std::string&, LayerFields& f, const Shape&) {
  return make_dropout(static_cast<float>(f.number("p", 0.5, 0.0, 0.999)));
}

LayerPtr build_batchnorm2d(const std::string&, LayerFields& f, const Shape& in) {
  need_rank(f, in, 3, "[C, H, W]");
  return make_batchnorm2d(in[0], static_cast<float>(f.number("eps", 1e-5, 1e-12, 1.0)),
                          static_cast<float>(f.number("momentum", 0.1, 0.0, 1.0)));
}

LayerPtr build_layernorm(const std::string&, LayerFields& f, const Shape& in) {
  if (in.empty()) throw f.error("needs an input with at least one dimension");
  return make_layernorm(in.back(), static_cast<float>(f.number("eps", 1e-5, 1e-12, 1.0)));
}

LayerPtr build_embedding(const std::string&, LayerFields& f, const Shape& in) {
  need_rank(f, in, 1, "[T] token");
  return make_embedding(f.integer("vocab", std::nullopt, 1), f.integer("dim", std::nullopt, 1), in[0]);
}

int64_t attention_heads(LayerFields& f, const Shape& in) {
  need_rank(f, in, 2, "[T, D]");
  const int64_t heads = f.integer("heads", std::nullopt, 1);
  if (in[1] % heads != 0) throw f.error("heads", cat("(", heads, ") must divide the width ", in[1]));
  return heads;
}

LayerPtr build_causal_self_attention(const std::string&, LayerFields& f, const Shape& in) {
  const int64_t heads = attention_heads(f, in);
  return make_causal_self_attention(in[1], heads);
}

LayerPtr build_transformer_block(const std::string&, LayerFields& f, const Shape& in) {
  const int64_t heads = attention_heads(f, in);
  return make_transformer_block(in[1], heads, static_cast<float>(f.number("dropout", 0.0, 0.0, 0.999)));
}

LayerPtr build_resnet_basic_block(const std::string&, LayerFields& f, const Shape& in) {
  need_rank(f, in, 3, "[C, H, W]");
  return make_resnet_basic_block(in[0], f.integer("out_channels", std::nullopt, 1),
                                 static_cast<int>(f.integer("stride", 1, 1)));
}

LayerPtr build_resnet_bottleneck_block(const std::string&, LayerFields& f, const Shape& in) {
  need_rank(f, in, 3, "[C, H, W]");
  return make_resnet_bottleneck_block(in[0], f.integer("mid_channels", std::nullopt, 1),
                                      f.integer("out_channels", std::nullopt, 1),
                                      static_cast<int>(f.integer("stride", 1, 1)));
}

struct LayerType {
  const char* name;
  LayerBuilder build;
  bool takes_tokens = false;  // reads i32 token ids; every other layer reads float features
};

// Every layer type a spec may name, in the order `known:` lists them.
const std::vector<LayerType>& layer_types() {
  static const std::vector<LayerType> types = {
      {"linear", build_linear},
      {"conv2d", build_conv2d},
      {"maxpool2d", build_pool2d},
      {"avgpool2d", build_pool2d},
      {"adaptive_avgpool2d", build_adaptive_avgpool2d},
      {"relu", build_relu},
      {"gelu", build_gelu},
      {"dropout", build_dropout},
      {"batchnorm2d", build_batchnorm2d},
      {"layernorm", build_layernorm},
      {"embedding", build_embedding, /*takes_tokens=*/true},
      {"causal_self_attention", build_causal_self_attention},
      {"flatten", build_flatten},
      {"resnet_basic_block", build_resnet_basic_block},
      {"resnet_bottleneck_block", build_resnet_bottleneck_block},
      {"transformer_block", build_transformer_block},
  };
  return types;
}

// Constructs one layer from its fields, given the per-sample input shape.
LayerPtr make_layer(const std::string& type, LayerFields& f, const Shape& in, DType in_dtype) {
  const auto& types = layer_types();
  auto it = std::find_if(types.begin(), types.end(), [&](const LayerType& t) { return type == t.name; });
  if (it == types.end()) {
    std::string known;
    for (const LayerType& t : types) known += cat(known.empty() ? "" : ", ", t.name);
    throw f.error("type", cat("'", type, "' is not a layer type; known: ", known));
  }
  if (it->takes_tokens && in_dtype != DType::I32) throw f.error("needs token ids (input dtype i32)");
  if (!it->takes_tokens && in_dtype != DType::F32)
    throw f.error(cat("takes float features, but its input is ", dtype_name(in_dtype), " tokens"));
  return it->build(type, f, in);
}

UserError spec_error(const std::string& what) { return UserError(cat("model spec: ", what)); }


// Every parameter and buffer of the layer fits kMaxElements (a linear of
// 2^31 x 2^31 would otherwise exhaust memory when allocated).
void check_parameter_sizes(const Layer& layer, const LayerFields& fields) {
  std::vector<ParamSpec> specs = layer.param_specs();
  for (const ParamSpec& b : layer.buffer_specs()) specs.push_back(b);
  for (const ParamSpec& p : specs) checked_numel(p.shape, {fields.field(p.name).where, cat("parameter '", p.name, "'")});
}

Shape read_input_shape(const json& input) {
  if (!input.is_object() || !input.contains("shape") || !input["shape"].is_array() || input["shape"].empty())
    throw spec_error("field 'input' must be {\"shape\": [dims...]} with at least one dimension");
  Shape s;
  for (size_t i = 0; i < input["shape"].size(); ++i)
    s.push_back(checked::integer(input["shape"][i], {"model spec", cat("field 'input.shape[", i, "]'")}, 1, kMaxSize));
  checked_numel(s, {"model spec", "field 'input.shape' (elements per sample)"});
  return s;
}

}  // namespace

Model build_model(const json& spec) {
  if (!spec.is_object()) throw spec_error("the spec must be a JSON object");
  static const std::set<std::string> known = {"name", "input", "classes", "task", "layers", "description", "options", "ties"};
  for (auto it = spec.begin(); it != spec.end(); ++it)
    if (!known.count(it.key())) throw spec_error(cat("unknown top-level field '", it.key(), "'", nearest(it.key(), known)));

  Model m;
  m.spec = spec;
  m.name = checked::string_or(spec, "name", "model", {"model spec", "field 'name'"});
  if (!spec.contains("input")) throw spec_error("field 'input' is required");
  m.input_shape = read_input_shape(spec["input"]);
  const std::string dtype = checked::string_or(spec["input"], "dtype", "f32", {"model spec", "field 'input.dtype'"});
  if (dtype == "f32") m.input_dtype = DType::F32;
  else if (dtype == "i32") m.input_dtype = DType::I32;
  else throw spec_error(cat("field 'input.dtype' must be f32 or i32, got '", dtype, "'"));
  const std::string task = checked::string_or(spec, "task", "classification", {"model spec", "field 'task'"});
  if (task == "classification") m.task = Task::Classification;
  else if (task == "language_model") m.task = Task::LanguageModel;
  else throw spec_error(cat("field 'task' must be classification or language_model, got '", task, "'"));
  if (!spec.contains("classes")) throw spec_error("field 'classes' is required (an integer >= 2)");
  m.classes = checked::integer(spec["classes"], {"model spec", "field 'classes'"}, 2, kMaxSize);
  if (!spec.contains("layers") || !spec["layers"].is_array() || spec["layers"].empty())
    throw spec_error("field 'layers' must be a non-empty array");

  Shape shape = m.input_shape;
  DType dt = m.input_dtype;
  std::set<std::string> names;
  std::map<std::string, int> type_counts;
  const json& layers = spec["layers"];
  for (size_t i = 0; i < layers.size(); ++i) {
    const int idx = static_cast<int>(i);
    const json& lj = layers[i];
    if (!lj.is_object() || !lj.contains("type") || !lj["type"].is_string())
      throw UserError(cat("model spec: layer ", idx, ": field 'type' is required (an object with a \"type\")"));
    const std::string type = lj["type"].get<std::string>();
    LayerFields fields(lj, idx, type);
    std::string name;
    if (lj.contains("name")) {
      if (!lj["name"].is_string() || lj["name"].get<std::string>().empty())
        throw fields.error("name", "must be a non-empty string");
      name = lj["name"].get<std::string>();
    } else {
      name = cat(type, ++type_counts[type]);
    }
    if (!names.insert(name).second) throw fields.error("name", cat("'", name, "' is used by an earlier layer"));

    LayerPtr layer = make_layer(type, fields, shape, dt);
    fields.reject_unknown();
    check_parameter_sizes(*layer, fields);
    Shape out;
    try {
      out = layer->output_shape(shape);
    } catch (const std::exception& e) {
      throw fields.error(cat("cannot take input ", shape_str(shape), ": ", e.what()));
    }
    if (out.empty() || checked_numel(out, {fields.field("output").where, "output (elements per sample)"}) <= 0)
      throw fields.error(cat("produces an empty output ", shape_str(out), " from input ", shape_str(shape)));
    m.layers.push_back({name, std::move(layer), shape, out});
    shape = out;
    dt = DType::F32;
  }

  const int last = m.size() - 1;
  Shape want = m.task == Task::Classification ? Shape{m.classes} : Shape{m.input_shape[0], m.classes};
  if (m.task == Task::LanguageModel && (m.input_dtype != DType::I32 || m.input_shape.size() != 1))
    throw spec_error("a language_model takes token ids: input {\"shape\": [T], \"dtype\": \"i32\"}");
  if (shape != want)
    throw UserError(cat("model spec: layer ", last, " (", m.layers.back().layer->type(), ") outputs ",
                        shape_str(shape), " per sample, but a ", task, " model with ", m.classes,
                        " classes must output ", shape_str(want)));
  if (spec.contains("ties")) m.ties = parse_ties(m, spec["ties"]);
  return m;
}

Model load_model_spec(const std::string& path) {
  const std::string text = read_input_file(path, "the model spec");
  check_json_depth(text, path);
  json spec;
  try {
    spec = json::parse(text);
  } catch (const json::exception& e) {
    throw UserError(cat("model spec ", path, " is not valid JSON: ", e.what()));
  }
  try {
    return build_model(spec);
  } catch (const UserError& e) {
    throw UserError(cat(path, ": ", e.what()));
  }
}

}  // namespace pd
