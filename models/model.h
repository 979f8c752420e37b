#pragma once
// A model is a sequence of top-level layers (a composite block such as a
// ResNet or Transformer block is one layer). Pipeline stages are contiguous
// ranges of these layers, so everything here is indexed by the top-level
// layer index. Models come from a JSON spec (configs/models/*.json) or from
// the zoo, which expands a name and options into the same spec.
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/layer.h"
#include "models/model_graph.h"
#include "models/ties.h"

namespace pd {

// classification: one label per sample, logits [classes].
// language_model: next-token targets, input tokens [T] (i32), logits [T, classes].
enum class Task { Classification, LanguageModel };
const char* task_name(Task t);

struct ModelLayer {
  std::string name;   // "conv1"; unique within the model
  LayerPtr layer;
  Shape input_shape;  // per sample
  Shape output_shape;
};

struct Model {
  std::string name;
  Shape input_shape;          // per sample, e.g. [1, 28, 28] or [128]
  DType input_dtype = DType::F32;
  int64_t classes = 0;        // output classes (the vocabulary for a language model)
  Task task = Task::Classification;
  std::vector<ModelLayer> layers;
  nlohmann::json spec;        // the spec it was built from (zoo names expanded)
  // Imported graphs: the DAG of units behind the layers (null for a chain
  // of layers: zoo and JSON specs).
  std::shared_ptr<const ModelGraph> graph;
  // Parameters read by several layers (models/ties.h): a spec's "ties", an
  // ONNX initializer read in several layers.
  std::vector<TieGroup> ties;

  int size() const { return static_cast<int>(layers.size()); }
  const Layer& layer(int i) const { return *layers.at(static_cast<size_t>(i)).layer; }
  // Per-sample label shape: [] for classification, [T] for a language model.
  Shape label_shape() const;
  int64_t parameter_count() const;                       // whole model
  int64_t parameter_count(int first, int last) const;    // layers [first, last]
};

// Builds a model from a spec. A bad spec throws UserError naming the layer
// index and the field ("layer 3 (conv2d): field 'kernel' must be ...").
Model build_model(const nlohmann::json& spec);
// Reads a JSON spec file (UserError when missing or malformed).
Model load_model_spec(const std::string& path);

// Zoo: mlp, cnn, vgg11, vgg16, vgg-mini, resnet18, resnet50, gpt, gpt-mini.
// Options (numbers) per model, e.g. vgg11 {width: 0.5, image_size: 32};
// an option the model does not know is a UserError.
using ZooOptions = std::map<std::string, double>;
std::vector<std::string> zoo_names();
bool is_zoo_name(const std::string& name);
nlohmann::json zoo_spec(const std::string& name, const ZooOptions& options = {});
// Parses "width=0.5,image_size=32" (UserError on junk).
ZooOptions parse_zoo_options(const std::string& text);

// What the CLI does with --model / --model-spec / --model-options: a zoo
// name, or a spec file (given by --model-spec, or a --model ending in .json).
Model resolve_model(const std::string& model, const std::string& spec_file = "",
                    const std::string& options = "");

// Importers of other model formats plug in here (models cannot depend on
// them): a --model ending in `extension` (".onnx") is loaded by `loader`.
// The pipedream binary registers the ONNX importer (onnx/) at start-up.
using ModelFileLoader = Model (*)(const std::string& path);
void register_model_file_loader(const std::string& extension, ModelFileLoader loader);

}  // namespace pd
