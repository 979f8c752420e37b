#pragma once
// Plans of an imported graph's DAG profile place units, not layers: each
// stage lists its units (`nodes`, antichain cuts). The runtime runs such a
// plan on the model rebuilt with one top-level layer per stage, whose
// boundaries carry every tensor that crosses the cut - skip connections
// forwarded through the stages in between (models/model_graph.h).
#include <string>

#include "models/model.h"
#include "planner/plan.h"

namespace pd {

// True when the plan's stages list profile nodes (a DAG profile's plan), or
// when its layer ranges number the units of `model`'s graph rather than its
// layers (a graph whose units form a chain is planned as a chain).
bool plan_places_units(const Plan& plan, const Model& model);

// Rebuilds `model` with one layer per stage of `plan` and renumbers the
// stages' layer ranges onto those layers. UserError (naming `source`)
// when the model has no graph or the plan's units are not the model's.
void stage_graph_model(Model& model, Plan& plan, const std::string& source);

}  // namespace pd
