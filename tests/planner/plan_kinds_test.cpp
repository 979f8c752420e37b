// The closed sets a plan records: each value's spelling in plan.json round
// trips, and any other text is refused with the field named.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "planner/plan.h"
#include "planner/plan_kinds.h"
#include "tests/user_error_of.h"

namespace pd {
namespace {

using testing_support::error_of;

TEST(PlanKinds, EverySpellingParsesBackToItsValue) {
  for (CostModel m : {CostModel::paper, CostModel::pipedream}) EXPECT_EQ(parse_cost_model(to_string(m)), m);
  for (StateSpaceKind k : {StateSpaceKind::chain, StateSpaceKind::antichain, StateSpaceKind::topological_prefix})
    EXPECT_EQ(parse_state_space_kind(to_string(k)), k);
  for (PredictedBy p : {PredictedBy::closed_form, PredictedBy::replay, PredictedBy::shared_cores})
    EXPECT_EQ(parse_predicted_by(to_string(p)), p);
  // The spellings plan.json has always used.
  EXPECT_STREQ(to_string(StateSpaceKind::topological_prefix), "topological-prefix");
  EXPECT_STREQ(to_string(PredictedBy::closed_form), "closed form");
  EXPECT_STREQ(to_string(PredictedBy::shared_cores), "shared cores");
  EXPECT_EQ(parse_cost_model("Paper"), std::nullopt);
  EXPECT_EQ(parse_predicted_by("closed_form"), std::nullopt);
}

nlohmann::json one_stage_plan() {
  return nlohmann::json::parse(R"({"format": "pipedream-plan/1", "config": "1",
    "stages": [{"index": 0, "layers": [0, 3], "replicas": 1, "ranks": [0]}]})");
}

TEST(PlanKinds, PlanJsonKeepsEachKindAndItsSpelling) {
  nlohmann::json j = one_stage_plan();
  Plan defaults = plan_from_json(j, "p.json");
  EXPECT_EQ(defaults.cost_model, CostModel::paper);
  EXPECT_EQ(defaults.state_space, std::nullopt);
  EXPECT_EQ(defaults.predicted_by, PredictedBy::closed_form);
  EXPECT_EQ(defaults.schedule, "1f1b-rr");
  EXPECT_EQ(plan_to_json(defaults)["schedule"], "1f1b-rr");
  EXPECT_EQ(plan_to_json(defaults)["state_space"], "");  // not recorded, as before

  j["cost_model"] = "pipedream";
  j["state_space"] = "topological-prefix";
  j["predicted"] = {{"by", "shared cores"}};
  j["schedule"] = "zb-h1";
  Plan p = plan_from_json(j, "p.json");
  EXPECT_EQ(p.cost_model, CostModel::pipedream);
  EXPECT_EQ(p.state_space, StateSpaceKind::topological_prefix);
  EXPECT_EQ(p.predicted_by, PredictedBy::shared_cores);
  EXPECT_EQ(p.schedule, "zb-h1");  // a name runtime/schedule's registry resolves
  const nlohmann::json back = plan_to_json(p);
  EXPECT_EQ(back["cost_model"], "pipedream");
  EXPECT_EQ(back["state_space"], "topological-prefix");
  EXPECT_EQ(back["predicted"]["by"], "shared cores");
  EXPECT_EQ(back["schedule"], "zb-h1");
}

TEST(PlanKinds, UnknownTextIsRefusedNamingTheField) {
  nlohmann::json j = one_stage_plan();
  j["cost_model"] = "papr";
  std::string why = error_of([&] { plan_from_json(j, "p.json"); });
  EXPECT_NE(why.find("\"cost_model\" must be \"paper\" or \"pipedream\", got 'papr'"), std::string::npos) << why;

  j = one_stage_plan();
  j["state_space"] = "prefix";
  why = error_of([&] { plan_from_json(j, "p.json"); });
  EXPECT_NE(why.find("\"state_space\""), std::string::npos) << why;

  j = one_stage_plan();
  j["predicted"] = {{"by", "guess"}};
  why = error_of([&] { plan_from_json(j, "p.json"); });
  EXPECT_NE(why.find("p.json: predicted: \"by\""), std::string::npos) << why;

  // The schedule is a name the runtime's registry resolves (and refuses,
  // naming every schedule: tests/schedule/registry_test.cpp); the planner
  // refuses only an empty one.
  j = one_stage_plan();
  j["schedule"] = "";
  why = error_of([&] { plan_from_json(j, "p.json"); });
  EXPECT_NE(why.find("p.json: \"schedule\" must name a schedule"), std::string::npos) << why;
}

}  // namespace
}  // namespace pd
