#include "runtime/graph_stages.h"

#include <functional>

#include "core/error.h"

namespace pd {

namespace {

bool ranges_name(const Plan& plan, int count, const std::function<const std::string&(int)>& name) {
  if (plan.stages.empty() || plan.stages.back().last_layer + 1 != count) return false;
  for (const PlanStage& s : plan.stages)
    for (int l = s.first_layer; l <= s.last_layer; ++l) {
      const size_t k = static_cast<size_t>(l - s.first_layer);
      if (k < s.layer_names.size() && s.layer_names[k] != name(l)) return false;
    }
  return true;
}

bool ranges_name_units(const Plan& plan, const Model& model) {
  if (!model.graph) return false;
  const auto& units = model.graph->units;
  const bool units_fit = ranges_name(plan, int(units.size()), [&](int u) -> const std::string& { return units[size_t(u)].name; });
  const bool layers_fit = ranges_name(plan, model.size(), [&](int l) -> const std::string& { return model.layers[size_t(l)].name; });
  return units_fit && !layers_fit;
}

}  // namespace

bool plan_places_units(const Plan& plan, const Model& model) {
  for (const PlanStage& s : plan.stages)
    if (!s.nodes.empty()) return true;
  return ranges_name_units(plan, model);
}

namespace {

// Each unit's stage, after checking the plan places every unit of the
// model's graph exactly once, under the unit's own name.
std::vector<int> stage_of_units(const ModelGraph& g, const Plan& plan, const std::string& source) {
  std::vector<int> stage(g.units.size(), -1);
  for (const PlanStage& s : plan.stages) {
    if (s.nodes.empty())
      throw UserError(cat(source, ": stages[", s.index, "] lists no nodes while other stages do"));
    for (size_t k = 0; k < s.nodes.size(); ++k) {
      const int u = s.nodes[k];
      if (u < 0 || u >= static_cast<int>(g.units.size()))
        throw UserError(cat(source, ": stages[", s.index, "] places node ", u, " but the model's graph has ",
                            g.units.size(), " units (0..", g.units.size() - 1, ")"));
      if (stage[size_t(u)] >= 0)
        throw UserError(cat(source, ": node ", u, " is placed in stages ", stage[size_t(u)], " and ", s.index));
      if (k < s.layer_names.size() && s.layer_names[k] != g.units[size_t(u)].name)
        throw UserError(cat(source, ": stages[", s.index, "] names node ", u, " '", s.layer_names[k],
                            "' but the model's unit ", u, " is '", g.units[size_t(u)].name,
                            "' (plan made for another model?)"));
      stage[size_t(u)] = s.index;
    }
  }
  for (size_t u = 0; u < stage.size(); ++u)
    if (stage[u] < 0)
      throw UserError(cat(source, ": no stage places node ", u, " ('", g.units[u].name, "')"));
  return stage;
}

}  // namespace

void stage_graph_model(Model& model, Plan& plan, const std::string& source) {
  if (!model.graph || !model.graph->restage)
    throw UserError(cat(source, " places the units of a graph profile (stages list `nodes`), but ", model.name,
                        " is a chain of layers: plan from a profile of this model"));
  if (ranges_name_units(plan, model))
    for (PlanStage& s : plan.stages) {
      s.nodes.clear();
      for (int u = s.first_layer; u <= s.last_layer; ++u) s.nodes.push_back(u);
    }
  const std::vector<int> stage = stage_of_units(*model.graph, plan, source);
  model = model.graph->restage(stage);
  PD_CHECK(model.size() == static_cast<int>(plan.stages.size()), "restaged model has ", model.size(),
           " layers for ", plan.stages.size(), " stages");
  for (PlanStage& s : plan.stages) {
    s.first_layer = s.last_layer = s.index;
    s.layer_names = {model.layers[size_t(s.index)].name};
    // A stage is one layer now: recomputing any of its units recomputes it
    // whole (keeping only the stage's input: no more memory, more time).
    if (!s.recompute_layers.empty()) s.recompute_layers = {s.index};
  }
}

}  // namespace pd
