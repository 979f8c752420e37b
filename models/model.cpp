#include "models/model.h"

#include <filesystem>
#include <map>

#include "core/error.h"

namespace pd {

const char* task_name(Task t) { return t == Task::Classification ? "classification" : "language_model"; }

Shape Model::label_shape() const {
  return task == Task::Classification ? Shape{} : Shape{input_shape.at(0)};
}

int64_t Model::parameter_count(int first, int last) const {
  PD_CHECK(first >= 0 && first <= last + 1 && last < size(), "bad layer range [", first, ", ", last, "]");
  int64_t n = 0;
  for (int i = first; i <= last; ++i)
    for (const ParamSpec& p : layers[static_cast<size_t>(i)].layer->param_specs()) n += shape_numel(p.shape);
  return n;
}

int64_t Model::parameter_count() const { return parameter_count(0, size() - 1); }

namespace {
std::map<std::string, ModelFileLoader>& file_loaders() {
  static std::map<std::string, ModelFileLoader> loaders;
  return loaders;
}
}  // namespace

void register_model_file_loader(const std::string& extension, ModelFileLoader loader) {
  file_loaders()[extension] = loader;
}

Model resolve_model(const std::string& model, const std::string& spec_file, const std::string& options) {
  if (!spec_file.empty()) {
    if (!model.empty()) throw UserError("give either --model or --model-spec, not both");
    if (!options.empty()) throw UserError("--model-options applies to zoo models, not to --model-spec");
    return load_model_spec(spec_file);
  }
  if (model.empty()) throw UserError("no model given: use --model NAME (see `pipedream models`) or --model-spec FILE");
  const std::string ext = std::filesystem::path(model).extension().string();
  if (auto it = file_loaders().find(ext); it != file_loaders().end()) {
    if (!options.empty()) throw UserError(cat("--model-options applies to zoo models, not to a ", ext, " file"));
    return it->second(model);
  }
  if (ext == ".onnx") throw UserError("this program cannot import ONNX models (the pipedream binary can)");
  const bool looks_like_file = model.size() > 5 && model.substr(model.size() - 5) == ".json";
  if (looks_like_file || (!is_zoo_name(model) && std::filesystem::is_regular_file(model))) {
    if (!options.empty()) throw UserError("--model-options applies to zoo models, not to a spec file");
    return load_model_spec(model);
  }
  return build_model(zoo_spec(model, parse_zoo_options(options)));
}

}  // namespace pd
