#pragma once
// The closed sets a plan records, and their spelling in plan.json and on
// the command line (the only places they are text).
#include <optional>
#include <string>
#include <string_view>

namespace pd {

// Which cost model chose the stages: the paper's (docs/design.md §5) or
// PipeDream's released optimizer (docs/planner-pipedream-compat.md).
enum class CostModel { paper, pipedream };

// The planner's states (planner/state_space.h): chain prefixes, every
// antichain cut of a DAG, or prefixes of one topological order.
enum class StateSpaceKind { chain, antichain, topological_prefix };

// What the plan's time per minibatch is: the planner's closed form,
// simulate's replay of the plan, or the bound of workers sharing one
// machine's cores (runtime/auto_plan.h).
enum class PredictedBy { closed_form, replay, shared_cores };

// "paper", "pipedream"; "chain", "antichain", "topological-prefix";
// "closed form", "replay", "shared cores".
const char* to_string(CostModel m);
const char* to_string(StateSpaceKind k);
const char* to_string(PredictedBy p);

// The inverse of to_string; nullopt for any other text (callers name the
// flag or field in their error).
std::optional<CostModel> parse_cost_model(std::string_view text);
std::optional<StateSpaceKind> parse_state_space_kind(std::string_view text);
std::optional<PredictedBy> parse_predicted_by(std::string_view text);

}  // namespace pd
