// The model spec's table of layer types: an unknown type lists every known
// one, and every listed name builds a layer (so the list and the builders
// cannot drift apart).
#include <gtest/gtest.h>

#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "models/model.h"

namespace pd {
namespace {

using nlohmann::json;

std::string unknown_type_error() {
  try {
    build_model(json::parse(R"({"input": {"shape": [4]}, "classes": 2, "layers": [{"type": "conv3d"}]})"));
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// The names after "known: ".
std::vector<std::string> listed_types() {
  const std::string e = unknown_type_error();
  const size_t at = e.find("known: ");
  if (at == std::string::npos) return {};
  std::vector<std::string> names;
  std::istringstream in(e.substr(at + 7));
  for (std::string name; std::getline(in, name, ',');) names.push_back(name.substr(name.find_first_not_of(' ')));
  return names;
}

TEST(LayerTypes, AnUnknownTypeListsEveryKnownOne) {
  EXPECT_NE(unknown_type_error().find("layer 0 (conv3d): field 'type' 'conv3d' is not a layer type; known: linear, "
                                      "conv2d, maxpool2d, avgpool2d, adaptive_avgpool2d, relu, gelu, dropout, "
                                      "batchnorm2d, layernorm, embedding, causal_self_attention, flatten, "
                                      "resnet_basic_block, resnet_bottleneck_block, transformer_block"),
            std::string::npos)
      << unknown_type_error();
}

// The smallest spec around one layer of each type: its required fields and
// an input it accepts, then whatever makes the output a classifier's.
json spec_with(const std::string& type) {
  json layer = {{"type", type}};
  json input = {{"shape", {2, 8, 8}}};
  json tail = json::array({{{"type", "flatten"}}, {{"type", "linear"}, {"out_features", 2}}});
  if (type == "linear") layer["out_features"] = 3;
  if (type == "conv2d") layer["out_channels"] = 2, layer["kernel"] = 3;
  if (type == "maxpool2d" || type == "avgpool2d") layer["kernel"] = 2;
  if (type == "adaptive_avgpool2d") layer["output_size"] = 1;
  if (type == "resnet_basic_block") layer["out_channels"] = 2;
  if (type == "resnet_bottleneck_block") layer["mid_channels"] = 2, layer["out_channels"] = 4;
  if (type == "linear" || type == "layernorm") input = {{"shape", {4}}}, tail = json::array({{{"type", "linear"}, {"out_features", 2}}});
  if (type == "embedding") {
    layer["vocab"] = 2, layer["dim"] = 4;
    return {{"input", {{"shape", {3}}, {"dtype", "i32"}}}, {"classes", 2}, {"task", "language_model"},
            {"layers", {layer, {{"type", "linear"}, {"out_features", 2}}}}};
  }
  if (type == "causal_self_attention" || type == "transformer_block") {
    layer["heads"] = 2;
    return {{"input", {{"shape", {3}}, {"dtype", "i32"}}}, {"classes", 2}, {"task", "language_model"},
            {"layers", {{{"type", "embedding"}, {"vocab", 2}, {"dim", 4}}, layer,
                        {{"type", "linear"}, {"out_features", 2}}}}};
  }
  json layers = json::array({layer});
  for (const json& t : tail) layers.push_back(t);
  return {{"input", input}, {"classes", 2}, {"layers", layers}};
}

TEST(LayerTypes, EveryListedTypeBuilds) {
  const std::vector<std::string> types = listed_types();
  ASSERT_EQ(types.size(), 16u) << unknown_type_error();
  for (const std::string& type : types) {
    try {
      const Model m = build_model(spec_with(type));
      EXPECT_GE(m.size(), 1) << type;
    } catch (const std::exception& e) {
      ADD_FAILURE() << type << ": " << e.what() << "\n" << spec_with(type).dump();
    }
  }
}

}  // namespace
}  // namespace pd
