// `pipedream models`: the zoo with parameter counts, or one model's layers.
#include <cstdio>
#include <iostream>

#include "cli/commands.h"
#include "core/error.h"
#include "core/text.h"
#include "models/model.h"

namespace pd::cli {

namespace {

std::string human(int64_t n) {
  char buf[32];
  if (n >= 1'000'000) std::snprintf(buf, sizeof buf, "%.2fM", static_cast<double>(n) / 1e6);
  else if (n >= 1'000) std::snprintf(buf, sizeof buf, "%.1fK", static_cast<double>(n) / 1e3);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

void list_zoo() {
  std::printf("%-10s %14s %8s  %-16s %s\n", "model", "parameters", "layers", "input", "task");
  for (const std::string& name : zoo_names()) {
    Model m = build_model(zoo_spec(name));
    std::printf("%-10s %14lld %8d  %-16s %s\n", name.c_str(), static_cast<long long>(m.parameter_count()),
                m.size(), (shape_str(m.input_shape) + (m.input_dtype == DType::I32 ? " i32" : "")).c_str(),
                task_name(m.task));
  }
  std::printf("\nOptions (--model-options k=v,...): mlp hidden,depth,classes; cnn classes; "
              "vgg11/vgg16/vgg-mini width,image_size,hidden,dropout,classes; resnet18/resnet50 "
              "width,image_size,classes; gpt/gpt-mini vocab,context,width,depth,heads,dropout,tie "
              "(tie=1: the head reads the token embedding's matrix, as GPT-2's does).\n"
              "`pipedream models --model NAME` shows the layers; --spec prints the JSON spec.\n");
}

void show_model(const Model& m) {
  // An imported graph is profiled and planned per unit: the count --straight compares with.
  const std::string units =
      m.graph ? cat(" (", m.graph->units.size(), " units: the nodes its profile times and plans split between)") : "";
  std::printf("%s: %s parameters, %d top-level layers%s, input %s %s, %lld classes, %s\n", m.name.c_str(),
              human(m.parameter_count()).c_str(), m.size(), units.c_str(), shape_str(m.input_shape).c_str(),
              dtype_name(m.input_dtype), static_cast<long long>(m.classes), task_name(m.task));
  std::printf("%5s  %-14s %-40s %-18s %12s\n", "index", "name", "layer", "output", "parameters");
  for (int i = 0; i < m.size(); ++i) {
    const ModelLayer& l = m.layers[static_cast<size_t>(i)];
    std::printf("%5d  %-14s %-40s %-18s %12lld\n", i, l.name.c_str(), l.layer->describe().c_str(),
                shape_str(l.output_shape).c_str(), static_cast<long long>(m.parameter_count(i, i)));
  }
  if (m.ties.empty()) return;
  // Each reader holds a copy (counted in its layer above); files hold it once.
  std::printf("tie groups (one parameter read by several layers; each holds a copy, their gradients summed "
              "before every step, so the layers may go to different stages):\n");
  for (const std::string& line : describe_ties(m)) std::printf("  %s\n", line.c_str());
}

}  // namespace

void add_models_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("models", "List the model zoo with parameter counts, or show one model's layers");
  struct Args {
    std::string model, spec_file, options;
    bool print_spec = false;
  };
  auto a = std::make_shared<Args>();
  auto* model = cmd->add_option("--model", a->model, "Zoo model name or spec file to show");
  cmd->add_option("--model-spec", a->spec_file, "JSON model spec file to show");
  cmd->add_option("--model-options", a->options, "Zoo model options, e.g. width=0.5,image_size=32")->needs(model);
  cmd->add_flag("--spec", a->print_spec, "Print the model's JSON spec instead of its layers");
  cmd->callback([a] {
    if (a->model.empty() && a->spec_file.empty()) {
      if (a->print_spec) throw UserError("--spec needs --model or --model-spec");
      list_zoo();
      return;
    }
    Model m = resolve_model(a->model, a->spec_file, a->options);
    if (a->print_spec) std::cout << m.spec.dump(2) << "\n";
    else show_model(m);
  });
}

}  // namespace pd::cli
