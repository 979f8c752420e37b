#include "planner/plan_kinds.h"

#include <array>
#include <utility>

#include "core/spelling_table.h"

namespace pd {
namespace {

// One table per set: to_string and parse read the same spelling.
constexpr std::array<std::pair<CostModel, const char*>, 2> kCostModels{
    {{CostModel::paper, "paper"}, {CostModel::pipedream, "pipedream"}}};
constexpr std::array<std::pair<StateSpaceKind, const char*>, 3> kStateSpaces{
    {{StateSpaceKind::chain, "chain"},
     {StateSpaceKind::antichain, "antichain"},
     {StateSpaceKind::topological_prefix, "topological-prefix"}}};
constexpr std::array<std::pair<PredictedBy, const char*>, 3> kPredictedBy{
    {{PredictedBy::closed_form, "closed form"},
     {PredictedBy::replay, "replay"},
     {PredictedBy::shared_cores, "shared cores"}}};
}  // namespace

const char* to_string(CostModel m) { return name_in(kCostModels, m); }
const char* to_string(StateSpaceKind k) { return name_in(kStateSpaces, k); }
const char* to_string(PredictedBy p) { return name_in(kPredictedBy, p); }

std::optional<CostModel> parse_cost_model(std::string_view text) { return value_in(kCostModels, text); }
std::optional<StateSpaceKind> parse_state_space_kind(std::string_view text) { return value_in(kStateSpaces, text); }
std::optional<PredictedBy> parse_predicted_by(std::string_view text) { return value_in(kPredictedBy, text); }

}  // namespace pd
