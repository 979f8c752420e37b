// Model specs and the zoo: shapes, parameter counts, and that a bad spec
// is refused with a message naming the layer index and the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "models/model.h"

namespace pd {
namespace {

using nlohmann::json;

// The UserError message of building this spec ("" when it builds).
std::string spec_error(const json& spec) {
  try {
    build_model(spec);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

json small_cnn() {
  return json::parse(R"({"name": "t", "input": {"shape": [1, 8, 8]}, "classes": 3, "layers": [
    {"type": "conv2d", "out_channels": 4, "kernel": 3, "padding": 1},
    {"type": "relu"}, {"type": "maxpool2d", "kernel": 2}, {"type": "flatten"},
    {"type": "linear", "out_features": 3}]})");
}

TEST(ModelSpec, BuildsLayersWithShapesAndDefaultNames) {
  Model m = build_model(small_cnn());
  ASSERT_EQ(m.size(), 5);
  EXPECT_EQ(m.layers[0].name, "conv2d1");
  EXPECT_EQ(m.layers[1].name, "relu1");
  EXPECT_EQ(m.layers[0].output_shape, (Shape{4, 8, 8}));
  EXPECT_EQ(m.layers[3].output_shape, (Shape{64}));
  EXPECT_EQ(m.layers[4].input_shape, (Shape{64}));
  EXPECT_EQ(m.task, Task::Classification);
  EXPECT_EQ(m.parameter_count(), 4 * 9 + 4 + 64 * 3 + 3);
  EXPECT_EQ(m.parameter_count(1, 3), 0);
}

TEST(ModelSpec, BadSpecsNameLayerAndField) {
  auto with_layer = [](int i, const json& l) {
    json s = small_cnn();
    s["layers"][i] = l;
    return s;
  };
  std::string e = spec_error(with_layer(0, {{"type", "conv2d"}, {"out_channels", 4}}));
  EXPECT_NE(e.find("layer 0 (conv2d)"), std::string::npos) << e;
  EXPECT_NE(e.find("'kernel'"), std::string::npos) << e;

  e = spec_error(with_layer(0, {{"type", "conv2d"}, {"out_channels", 4}, {"kernel", 3}, {"kernal", 3}}));
  EXPECT_NE(e.find("'kernal'"), std::string::npos) << e;

  e = spec_error(with_layer(0, {{"type", "conv2d"}, {"out_channels", -4}, {"kernel", 3}}));
  EXPECT_NE(e.find("'out_channels'"), std::string::npos) << e;

  e = spec_error(with_layer(2, {{"type", "maxpool2d"}, {"kernel", "2"}}));
  EXPECT_NE(e.find("layer 2 (maxpool2d)"), std::string::npos) << e;
  EXPECT_NE(e.find("'kernel'"), std::string::npos) << e;

  e = spec_error(with_layer(1, {{"type", "convolution"}}));
  EXPECT_NE(e.find("layer 1"), std::string::npos) << e;
  EXPECT_NE(e.find("'type'"), std::string::npos) << e;

  e = spec_error(with_layer(4, {{"type", "linear"}, {"out_features", 5}}));
  EXPECT_NE(e.find("layer 4"), std::string::npos) << e;  // outputs [5], 3 classes wanted

  e = spec_error(with_layer(4, {{"type", "conv2d"}, {"out_channels", 3}, {"kernel", 1}}));
  EXPECT_NE(e.find("layer 4 (conv2d)"), std::string::npos) << e;  // flat input

  json s = small_cnn();
  s["layers"][1]["name"] = "conv2d1";
  e = spec_error(s);
  EXPECT_NE(e.find("layer 1"), std::string::npos) << e;
  EXPECT_NE(e.find("'name'"), std::string::npos) << e;

  s = small_cnn();
  s.erase("classes");
  EXPECT_NE(spec_error(s).find("'classes'"), std::string::npos);
  s = small_cnn();
  s["inputs"] = s["input"];
  EXPECT_NE(spec_error(s).find("'inputs'"), std::string::npos);
  EXPECT_NE(spec_error(json::array()), "");
}

// Numbers that used to wrap, truncate or crash: each is refused naming its field.
TEST(ModelSpec, NumbersThatDoNotFitAreRefusedNamingTheField) {
  json s = small_cnn();
  s["input"]["shape"] = json::parse("[4611686018427387904]");  // 2^62: segfaulted train and profile
  std::string e = spec_error(s);
  EXPECT_NE(e.find("'input.shape[0]'"), std::string::npos) << e;
  EXPECT_NE(e.find("4611686018427387904"), std::string::npos) << e;

  s = small_cnn();
  s["input"]["shape"] = {65536, 65536, 65536};  // each fits, the product does not
  EXPECT_NE(spec_error(s).find("'input.shape'"), std::string::npos) << spec_error(s);

  s = small_cnn();
  s["layers"][0]["kernel"] = json::parse("4294967301");  // 2^32 + 5 trained as 5
  e = spec_error(s);
  EXPECT_NE(e.find("layer 0 (conv2d): field 'kernel'"), std::string::npos) << e;
  EXPECT_NE(e.find("4294967301"), std::string::npos) << e;

  s = small_cnn();
  s["layers"][0]["padding"] = 5.7;
  EXPECT_NE(spec_error(s).find("field 'padding'"), std::string::npos) << spec_error(s);

  s = small_cnn();
  s["layers"][4]["out_features"] = 2147483647;  // 64 x (2^31 - 1) weights
  EXPECT_NE(spec_error(s).find("parameter 'weight'"), std::string::npos) << spec_error(s);

  s = small_cnn();
  s["classes"] = json::parse("18446744073709551620");
  EXPECT_NE(spec_error(s).find("'classes'"), std::string::npos) << spec_error(s);

  s = small_cnn();
  s["layers"][0]["out_channels"] = 1e308;
  EXPECT_NE(spec_error(s).find("'out_channels'"), std::string::npos) << spec_error(s);
}

// nlohmann's value() threw json.exception.type_error.302 (exit 1) for these.
TEST(ModelSpec, WrongTypesOfTextFieldsAreUserErrors) {
  for (const char* field : {"name", "task"}) {
    json s = small_cnn();
    s[field] = 5;
    EXPECT_NE(spec_error(s).find(std::string("field '") + field + "' must be a string"), std::string::npos)
        << spec_error(s);
  }
  json s = small_cnn();
  s["input"]["dtype"] = json::array();
  EXPECT_NE(spec_error(s).find("field 'input.dtype' must be a string"), std::string::npos) << spec_error(s);
}

TEST(ModelSpec, SequenceModelChecks) {
  json gpt = zoo_spec("gpt-mini", {{"depth", 1}});
  Model m = build_model(gpt);
  EXPECT_EQ(m.task, Task::LanguageModel);
  EXPECT_EQ(m.input_dtype, DType::I32);
  EXPECT_EQ(m.label_shape(), (Shape{128}));
  EXPECT_EQ(m.layers.back().output_shape, (Shape{128, 256}));
  gpt["layers"][1]["heads"] = 3;  // does not divide 256
  std::string e = spec_error(gpt);
  EXPECT_NE(e.find("layer 1 (transformer_block)"), std::string::npos) << e;
  EXPECT_NE(e.find("'heads'"), std::string::npos) << e;
  gpt = zoo_spec("gpt-mini", {{"depth", 1}});
  gpt["input"]["dtype"] = "f32";
  EXPECT_NE(spec_error(gpt).find("layer 0 (embedding)"), std::string::npos);
}

TEST(Zoo, ParameterCountsMatchTheReferenceArchitectures) {
  // mlp 784-1024-1024-1024-10 and cnn as specified; VGG and ResNet as torchvision.
  EXPECT_EQ(build_model(zoo_spec("mlp")).parameter_count(), 785 * 1024 + 2 * 1025 * 1024 + 1025 * 10);
  EXPECT_EQ(build_model(zoo_spec("cnn")).parameter_count(), 832 + 51264 + (3136 + 1) * 512 + 513 * 10);
  EXPECT_EQ(build_model(zoo_spec("vgg11")).parameter_count(), 132863336);
  EXPECT_EQ(build_model(zoo_spec("vgg16")).parameter_count(), 138357544);
  EXPECT_EQ(build_model(zoo_spec("resnet18")).parameter_count(), 11689512);
  EXPECT_EQ(build_model(zoo_spec("resnet50")).parameter_count(), 25557032);
  Model mini = build_model(zoo_spec("vgg-mini"));
  EXPECT_EQ(mini.input_shape, (Shape{3, 32, 32}));
  EXPECT_EQ(mini.layers[0].output_shape, (Shape{16, 32, 32}));
  EXPECT_EQ(mini.layers[mini.size() - 3].output_shape, (Shape{256}));
  Model gm = build_model(zoo_spec("gpt-mini"));
  EXPECT_EQ(gm.size(), 1 + 4 + 2);
  EXPECT_EQ(gm.input_shape, (Shape{128}));
}

TEST(Zoo, OptionsScaleAndUnknownOptionsAreRefused) {
  Model v = build_model(zoo_spec("vgg11", {{"width", 0.5}, {"image_size", 32}, {"classes", 10}}));
  EXPECT_EQ(v.layers[0].output_shape, (Shape{32, 32, 32}));
  EXPECT_EQ(v.input_shape, (Shape{3, 32, 32}));
  Model r = build_model(zoo_spec("resnet18", {{"width", 0.25}, {"image_size", 32}, {"classes", 10}}));
  EXPECT_EQ(r.layers[0].output_shape, (Shape{16, 32, 32}));
  EXPECT_EQ(r.layers.back().output_shape, (Shape{10}));
  EXPECT_THROW(zoo_spec("vgg11", {{"widht", 0.5}}), UserError);
  EXPECT_THROW(zoo_spec("gpt", {{"heads", 5}}), UserError);
  EXPECT_THROW(zoo_spec("resnet34"), UserError);
  EXPECT_EQ(parse_zoo_options("width=0.5,image_size=32").at("image_size"), 32);
  EXPECT_THROW(parse_zoo_options("width"), UserError);
  EXPECT_THROW(parse_zoo_options("width=wide"), UserError);
}

TEST(Zoo, ConfigFilesDescribeTheZooModels) {
  for (const std::string& name : zoo_names()) {
    const std::string path = std::string(PD_SOURCE_DIR) + "/configs/models/" + name + ".json";
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    Model file = load_model_spec(path), zoo = build_model(zoo_spec(name));
    ASSERT_EQ(file.size(), zoo.size()) << name;
    EXPECT_EQ(file.parameter_count(), zoo.parameter_count()) << name;
    for (int i = 0; i < zoo.size(); ++i) {
      EXPECT_EQ(file.layers[i].name, zoo.layers[i].name);
      EXPECT_EQ(file.layers[i].layer->describe(), zoo.layers[i].layer->describe()) << name << " layer " << i;
    }
  }
}

TEST(ModelSpec, ResolveModelFromNameOrFile) {
  EXPECT_EQ(resolve_model("cnn").name, "cnn");
  EXPECT_EQ(resolve_model("", std::string(PD_SOURCE_DIR) + "/configs/models/mlp.json").name, "mlp");
  EXPECT_THROW(resolve_model(""), UserError);
  EXPECT_THROW(resolve_model("cnn", "x.json"), UserError);
  EXPECT_THROW(resolve_model("/nonexistent/model.json"), UserError);
  const auto bad = std::filesystem::temp_directory_path() / "pd_bad_spec.json";
  { std::ofstream(bad) << "{\"name\": \"x\", "; }
  EXPECT_THROW(load_model_spec(bad.string()), UserError);
  std::filesystem::remove(bad);
}

}  // namespace
}  // namespace pd
