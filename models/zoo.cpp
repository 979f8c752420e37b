// The model zoo: each name expands to a JSON model spec, so zoo models and
// spec files go through the same builder and the same checks.
#include <cmath>
#include <set>
#include <sstream>

#include "core/error.h"
#include "models/model.h"

namespace pd {

namespace {

using nlohmann::json;

// Options a zoo model accepts, with defaults; reading one marks it used.
class Options {
 public:
  Options(std::string model, const ZooOptions& given) : model_(std::move(model)), given_(given) {}
  double get(const std::string& key, double fallback) {
    known_.insert(key);
    auto it = given_.find(key);
    return it == given_.end() ? fallback : it->second;
  }
  int64_t positive_int(const std::string& key, int64_t fallback) {
    double v = get(key, static_cast<double>(fallback));
    if (v < 1 || v != std::floor(v))
      throw UserError(cat("model ", model_, ": option ", key, " must be a positive integer, got ", v));
    return static_cast<int64_t>(v);
  }
  double positive(const std::string& key, double fallback) {
    double v = get(key, fallback);
    if (!(v > 0)) throw UserError(cat("model ", model_, ": option ", key, " must be > 0, got ", v));
    return v;
  }
  void reject_unknown() const {
    for (const auto& [k, v] : given_)
      if (!known_.count(k)) {
        std::string list;
        for (const auto& n : known_) list += (list.empty() ? "" : ", ") + n;
        throw UserError(cat("model ", model_, " has no option '", k, "' (options: ", list, ")"));
      }
  }
  json record() const { return json(given_); }

 private:
  std::string model_;
  ZooOptions given_;
  std::set<std::string> known_;
};

// Channel count scaled by a width multiplier, at least 1.
int64_t scaled(int64_t channels, double width) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::lround(static_cast<double>(channels) * width)));
}

json layer(const std::string& type, const std::string& name, json fields = json::object()) {
  fields["type"] = type;
  fields["name"] = name;
  return fields;
}

json image_input(int64_t c, int64_t hw) { return {{"shape", {c, hw, hw}}}; }

json mlp_spec(Options& o) {
  const int64_t hidden = o.positive_int("hidden", 1024), depth = o.positive_int("depth", 3);
  const int64_t classes = o.positive_int("classes", 10);
  json layers = json::array({layer("flatten", "flatten")});
  for (int64_t i = 1; i <= depth; ++i) {
    layers.push_back(layer("linear", cat("fc", i), {{"out_features", hidden}}));
    layers.push_back(layer("relu", cat("relu", i)));
  }
  layers.push_back(layer("linear", cat("fc", depth + 1), {{"out_features", classes}}));
  return {{"name", "mlp"}, {"input", image_input(1, 28)}, {"classes", classes}, {"layers", layers}};
}

json cnn_spec(Options& o) {
  const int64_t classes = o.positive_int("classes", 10);
  json layers = {
      layer("conv2d", "conv1", {{"out_channels", 32}, {"kernel", 5}, {"padding", 2}}),
      layer("relu", "relu1"),
      layer("maxpool2d", "pool1", {{"kernel", 2}}),
      layer("conv2d", "conv2", {{"out_channels", 64}, {"kernel", 5}, {"padding", 2}}),
      layer("relu", "relu2"),
      layer("maxpool2d", "pool2", {{"kernel", 2}}),
      layer("flatten", "flatten"),
      layer("linear", "fc1", {{"out_features", 512}}),
      layer("relu", "relu3"),
      layer("linear", "fc2", {{"out_features", classes}}),
  };
  return {{"name", "cnn"}, {"input", image_input(1, 28)}, {"classes", classes}, {"layers", layers}};
}

// VGG: 3x3 convs (pad 1) with ReLU, 2x2 max-pools, then a 3-layer classifier.
json vgg_spec(const std::string& name, const std::vector<int>& cfg, Options& o, double width_default,
              int64_t size_default, int64_t hidden_default, double dropout_default, int64_t classes_default) {
  const double width = o.positive("width", width_default);
  const int64_t size = o.positive_int("image_size", size_default);
  const int64_t hidden = o.positive_int("hidden", hidden_default);
  const int64_t classes = o.positive_int("classes", classes_default);
  const double dropout = o.get("dropout", dropout_default);
  if (size % 32 != 0) throw UserError(cat("model ", name, ": image_size must be a multiple of 32, got ", size));
  json layers = json::array();
  int conv = 0, pool = 0;
  int64_t channels = 0;
  for (int c : cfg) {
    if (c == 0) {
      layers.push_back(layer("maxpool2d", cat("pool", ++pool), {{"kernel", 2}}));
    } else {
      channels = scaled(c, width);
      ++conv;
      layers.push_back(layer("conv2d", cat("conv", conv), {{"out_channels", channels}, {"kernel", 3}, {"padding", 1}}));
      layers.push_back(layer("relu", cat("relu", conv)));
    }
  }
  layers.push_back(layer("flatten", "flatten"));
  for (int i = 1; i <= 2; ++i) {
    layers.push_back(layer("linear", cat("fc", i), {{"out_features", hidden}}));
    layers.push_back(layer("relu", cat("fc_relu", i)));
    if (dropout > 0) layers.push_back(layer("dropout", cat("dropout", i), {{"p", dropout}}));
  }
  layers.push_back(layer("linear", "fc3", {{"out_features", classes}}));
  return {{"name", name}, {"input", image_input(3, size)}, {"classes", classes}, {"layers", layers}};
}

const std::vector<int> kVgg11 = {64, 0, 128, 0, 256, 256, 0, 512, 512, 0, 512, 512, 0};
const std::vector<int> kVgg16 = {64, 64, 0, 128, 128, 0, 256, 256, 256, 0, 512, 512, 512, 0, 512, 512, 512, 0};

// ResNet: ImageNet stem (7x7/2 conv, BN, ReLU, 3x3/2 max-pool) for inputs of
// 64 pixels and more, CIFAR stem (3x3/1 conv, BN, ReLU) below; four stages
// of blocks; global average pool; linear classifier.
json resnet_spec(const std::string& name, bool bottleneck, const std::vector<int>& blocks, Options& o) {
  const double width = o.positive("width", 1.0);
  const int64_t size = o.positive_int("image_size", 224);
  const int64_t classes = o.positive_int("classes", 1000);
  const int64_t base = scaled(64, width);
  json layers = json::array();
  if (size >= 64) {
    layers.push_back(layer("conv2d", "stem_conv", {{"out_channels", base}, {"kernel", 7}, {"stride", 2}, {"padding", 3}, {"bias", false}}));
    layers.push_back(layer("batchnorm2d", "stem_bn"));
    layers.push_back(layer("relu", "stem_relu"));
    layers.push_back(layer("maxpool2d", "stem_pool", {{"kernel", 3}, {"stride", 2}, {"padding", 1}}));
  } else {
    layers.push_back(layer("conv2d", "stem_conv", {{"out_channels", base}, {"kernel", 3}, {"padding", 1}, {"bias", false}}));
    layers.push_back(layer("batchnorm2d", "stem_bn"));
    layers.push_back(layer("relu", "stem_relu"));
  }
  for (int s = 0; s < 4; ++s) {
    const int64_t mid = base << s;
    for (int b = 0; b < blocks[static_cast<size_t>(s)]; ++b) {
      const int stride = (s > 0 && b == 0) ? 2 : 1;
      const std::string n = cat("layer", s + 1, ".", b);
      if (bottleneck)
        layers.push_back(layer("resnet_bottleneck_block", n, {{"mid_channels", mid}, {"out_channels", mid * 4}, {"stride", stride}}));
      else
        layers.push_back(layer("resnet_basic_block", n, {{"out_channels", mid}, {"stride", stride}}));
    }
  }
  layers.push_back(layer("adaptive_avgpool2d", "avgpool", {{"output_size", 1}}));
  layers.push_back(layer("flatten", "flatten"));
  layers.push_back(layer("linear", "fc", {{"out_features", classes}}));
  return {{"name", name}, {"input", image_input(3, size)}, {"classes", classes}, {"layers", layers}};
}

// GPT: token + position embedding, pre-LN transformer blocks, final
// LayerNorm, linear head to the vocabulary (no bias). tie=1: the head reads
// the token embedding's matrix, as GPT-2's does (models/ties.h).
json gpt_spec(const std::string& name, Options& o, int64_t vocab_d, int64_t context_d, int64_t width_d,
              int64_t depth_d, int64_t heads_d) {
  const int64_t vocab = o.positive_int("vocab", vocab_d), context = o.positive_int("context", context_d);
  const int64_t width = o.positive_int("width", width_d), depth = o.positive_int("depth", depth_d);
  const int64_t heads = o.positive_int("heads", heads_d);
  const double dropout = o.get("dropout", 0.0);
  const double tie = o.get("tie", 0);
  if (tie != 0 && tie != 1) throw UserError(cat("model ", name, ": option tie must be 0 or 1, got ", tie));
  if (width % heads != 0) throw UserError(cat("model ", name, ": heads (", heads, ") must divide width (", width, ")"));
  json layers = json::array({layer("embedding", "embed", {{"vocab", vocab}, {"dim", width}})});
  for (int64_t i = 0; i < depth; ++i) {
    json f = {{"heads", heads}};
    if (dropout > 0) f["dropout"] = dropout;
    layers.push_back(layer("transformer_block", cat("block", i), f));
  }
  layers.push_back(layer("layernorm", "ln_f"));
  layers.push_back(layer("linear", "head", {{"out_features", vocab}, {"bias", false}}));
  json spec = {{"name", name}, {"input", {{"shape", {context}}, {"dtype", "i32"}}}, {"classes", vocab},
               {"task", "language_model"}, {"layers", layers}};
  if (tie == 1) spec["ties"] = json::array({json::array({"embed.token.weight", "head.weight"})});
  return spec;
}

}  // namespace

std::vector<std::string> zoo_names() {
  return {"mlp", "cnn", "vgg11", "vgg16", "vgg-mini", "resnet18", "resnet50", "gpt", "gpt-mini"};
}

bool is_zoo_name(const std::string& name) {
  for (const auto& n : zoo_names())
    if (n == name) return true;
  return false;
}

json zoo_spec(const std::string& name, const ZooOptions& options) {
  Options o(name, options);
  json spec;
  if (name == "mlp") spec = mlp_spec(o);
  else if (name == "cnn") spec = cnn_spec(o);
  else if (name == "vgg11") spec = vgg_spec(name, kVgg11, o, 1.0, 224, 4096, 0.5, 1000);
  else if (name == "vgg16") spec = vgg_spec(name, kVgg16, o, 1.0, 224, 4096, 0.5, 1000);
  else if (name == "vgg-mini") spec = vgg_spec(name, kVgg11, o, 0.25, 32, 256, 0.0, 10);
  else if (name == "resnet18") spec = resnet_spec(name, false, {2, 2, 2, 2}, o);
  else if (name == "resnet50") spec = resnet_spec(name, true, {3, 4, 6, 3}, o);
  else if (name == "gpt") spec = gpt_spec(name, o, 50304, 1024, 768, 12, 12);
  else if (name == "gpt-mini") spec = gpt_spec(name, o, 256, 128, 256, 4, 4);
  else {
    std::string list;
    for (const auto& n : zoo_names()) list += (list.empty() ? "" : ", ") + n;
    throw UserError(cat("unknown model '", name, "': the zoo has ", list, " (or give a spec file with --model-spec)"));
  }
  o.reject_unknown();
  if (!options.empty()) spec["options"] = o.record();
  return spec;
}

ZooOptions parse_zoo_options(const std::string& text) {
  ZooOptions out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    size_t eq = item.find('=');
    if (eq == std::string::npos || eq == 0)
      throw UserError(cat("model option '", item, "' is not KEY=NUMBER (e.g. width=0.5,image_size=32)"));
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    try {
      size_t used = 0;
      double v = std::stod(value, &used);
      if (used != value.size()) throw std::invalid_argument("trailing");
      out[key] = v;
    } catch (const std::exception&) {
      throw UserError(cat("model option ", key, " needs a number, got '", value, "'"));
    }
  }
  return out;
}

}  // namespace pd
