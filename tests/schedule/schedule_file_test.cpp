// Schedules as data: export, read back, replay, edit, reject.
#include <gtest/gtest.h>

#include <algorithm>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "runtime/schedule/check.h"
#include "runtime/schedule/schedule_file.h"
#include "runtime/simulator/simulator.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

using testing::make_plan;

ScheduleOptions options(const ScheduleKind* kind, int64_t minibatches, int microbatches = 1,
                        WeightPolicy policy = WeightPolicy::Stash) {
  return testing::schedule_options(kind, minibatches, microbatches, policy);
}

// The built-in schedules the files must carry, on a 4-stage and a
// replicated plan.
std::vector<std::pair<std::vector<int>, ScheduleOptions>> cases() {
  return {{{1, 1, 1, 1}, options(parse_schedule_kind("1f1b-rr"), 12)},
          {{1, 1, 1, 1}, options(parse_schedule_kind("1f1b-rr"), 12, 1, WeightPolicy::Vertical)},
          {{1, 1, 1, 1}, options(parse_schedule_kind("1f1b-rr"), 12, 1, WeightPolicy::None)},
          {{1, 1, 1, 1}, options(parse_schedule_kind("gpipe"), 3, 4)},
          {{1, 1, 1, 1}, options(parse_schedule_kind("1f1b-flush"), 3, 4)},
          {{2, 1, 1}, options(parse_schedule_kind("1f1b-rr"), 13)},
          {{2, 1, 1}, options(parse_schedule_kind("1f1b-flush"), 2, 5)}};
}

std::string as_csv(const ScheduleFile& f) {
  std::ostringstream os;
  write_schedule_csv(os, f);
  return os.str();
}

std::string as_json(const ScheduleFile& f) {
  std::ostringstream os;
  write_schedule_json(os, f);
  return os.str();
}

void expect_same_actions(const std::vector<std::vector<Action>>& a, const std::vector<std::vector<Action>>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].size(), b[r].size()) << "rank " << r;
    for (size_t i = 0; i < a[r].size(); ++i)
      EXPECT_EQ(format_action(a[r][i]), format_action(b[r][i])) << "rank " << r << " action " << i;
  }
}

nlohmann::json simulated(const Plan& plan, const ScheduleOptions& o,
                         const std::vector<std::vector<Action>>* lists = nullptr) {
  SimulationOptions so;
  so.schedule = o;
  so.actions = lists;
  return report_to_json(simulate(plan, so));
}

TEST(ScheduleFile, CsvAndJsonRoundTripEveryBuiltInSchedule) {
  for (const auto& [replicas, o] : cases()) {
    const Plan plan = make_plan(replicas, 1.0, 2.0, 1000, 1000);
    const ScheduleFile exported = export_schedule(Schedule(plan, o));
    for (const std::string& text : {as_csv(exported), as_json(exported)}) {
      const ScheduleFile back = parse_schedule(text, "test");
      EXPECT_EQ(back.options.kind, o.kind);
      EXPECT_EQ(back.options.policy, o.policy);
      EXPECT_EQ(back.options.microbatches, o.microbatches);
      EXPECT_EQ(back.options.minibatches, o.minibatches);
      EXPECT_EQ(back.stage_of_rank, exported.stage_of_rank);
      expect_same_actions(back.lists, exported.lists);
      // CSV and JSON carry the same information: each converts to the other.
      EXPECT_EQ(as_csv(back), as_csv(exported));
      EXPECT_EQ(as_json(back), as_json(exported));
    }
  }
}

TEST(ScheduleFile, ReplayingTheExportGivesTheBuiltInReport) {
  for (const auto& [replicas, o] : cases()) {
    const Plan plan = make_plan(replicas, 1.0, 2.0, 1000, 1000);
    const ScheduleFile file = parse_schedule(as_csv(export_schedule(Schedule(plan, o))), "test.csv");
    checked_schedule(plan, file, "test.csv");
    EXPECT_EQ(simulated(plan, file.options, &file.lists), simulated(plan, o)) << to_string(o.kind);
  }
}

// Rank 3 (last stage) of a 4-stage 1f1b-rr: B(m), SEND_B(m), STEP. The step
// does not depend on the send: swapping them is another valid order.
TEST(ScheduleFile, AnEditThatKeepsTheScheduleValidIsAccepted) {
  const Plan plan = make_plan({1, 1, 1, 1});
  const ScheduleOptions o = options(parse_schedule_kind("1f1b-rr"), 12);
  ScheduleFile file = export_schedule(Schedule(plan, o));
  auto& last = file.lists[3];
  auto send = std::find_if(last.begin(), last.end(), [](const Action& a) { return a.kind == ActionKind::SendGradient; });
  ASSERT_NE(send, last.end());
  ASSERT_EQ((send + 1)->kind, ActionKind::OptimizerStep);
  std::iter_swap(send, send + 1);
  const ScheduleFile edited = parse_schedule(as_csv(file), "edited.csv");
  EXPECT_NO_THROW(checked_schedule(plan, edited, "edited.csv"));
  // Steps take no time: the replay is unchanged.
  EXPECT_EQ(simulated(plan, o, &edited.lists), simulated(plan, o));
}

std::string rejection(const Plan& plan, const ScheduleFile& file) {
  try {
    checked_schedule(plan, parse_schedule(as_csv(file), "bad.csv"), "bad.csv");
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

// Stage 0 waits for minibatch 0's gradient before sending its activation.
TEST(ScheduleFile, AReceiveBeforeItsSendCanHappenIsRejectedNamingTheAction) {
  const Plan plan = make_plan({1, 1, 1, 1});
  ScheduleFile file = export_schedule(Schedule(plan, options(parse_schedule_kind("1f1b-flush"), 2, 4)));
  auto& first = file.lists[0];
  auto recv = std::find_if(first.begin(), first.end(), [](const Action& a) { return a.kind == ActionKind::RecvGradient; });
  ASSERT_NE(recv, first.end());
  std::rotate(first.begin(), recv, recv + 1);  // to the front
  const std::string msg = rejection(plan, file);
  EXPECT_NE(msg.find("bad.csv: the schedule is rejected: deadlock: rank 0 blocks forever at action 0 recv-grad(b=0 mb=0)"),
            std::string::npos)
      << msg;
}

// Rank 0 sends minibatch 0's activation before its forward has made it.
TEST(ScheduleFile, ASendBeforeTheComputationThatMakesItIsRejected) {
  const Plan plan = make_plan({1, 1, 1, 1});
  ScheduleFile file = export_schedule(Schedule(plan, options(parse_schedule_kind("1f1b-rr"), 8)));
  auto& first = file.lists[0];
  auto send = std::find_if(first.begin(), first.end(), [](const Action& a) { return a.kind == ActionKind::SendActivation; });
  ASSERT_NE(send, first.end());
  std::rotate(first.begin(), send, send + 1);  // to the front, ahead of F(0)
  const std::string msg = rejection(plan, file);
  EXPECT_NE(msg.find("sends an activation before its forward made it"), std::string::npos) << msg;
}

TEST(ScheduleFile, AMissingBackwardIsRejected) {
  const Plan plan = make_plan({1, 1, 1, 1});
  ScheduleFile file = export_schedule(Schedule(plan, options(parse_schedule_kind("1f1b-rr"), 8)));
  auto& list = file.lists[2];
  auto b = std::find_if(list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::Backward; });
  list.erase(b);
  const std::string msg = rejection(plan, file);
  EXPECT_NE(msg.find("stage 2: item 0 runs forward 1 and backward 0 times"), std::string::npos) << msg;
}

TEST(ScheduleFile, ASendWithTheWrongTagIsRefusedNamingItsLine) {
  const Plan plan = make_plan({1, 1});
  std::string csv = as_csv(export_schedule(Schedule(plan, options(parse_schedule_kind("1f1b-rr"), 2))));
  const size_t at = csv.find("SEND_F,0,0,,1,0");
  ASSERT_NE(at, std::string::npos) << csv;
  csv.replace(at, 15, "SEND_F,0,0,,1,6");
  try {
    parse_schedule(csv, "t.csv");
    FAIL() << "accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("t.csv line 4: tag 6 does not belong to minibatch 0"), std::string::npos)
        << e.what();
  }
}

TEST(ScheduleFile, MalformedFilesSayWhatToFix) {
  auto error = [](const std::string& text) {
    try {
      parse_schedule(text, "f");
    } catch (const UserError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string header = "# pipedream-schedule/1 schedule=1f1b-rr minibatches=1 workers=2\n";
  EXPECT_NE(error("rank,stage,action\n").find("the first line must be"), std::string::npos);
  EXPECT_NE(error(header + "rank,action\n").find("no 'stage' column"), std::string::npos);
  EXPECT_NE(error(header + "rank,stage,action\n0,0,X\n").find("line 3: unknown action 'X'"), std::string::npos);
  EXPECT_NE(error(header + "rank,stage,action,minibatch\n0,0,F,0\n").find("F needs the field 'weight_version'"),
            std::string::npos);
  EXPECT_NE(error(header + "rank,stage,action\n5,0,STEP\n").find("line 3: STEP needs the field 'round'"),
            std::string::npos);
  EXPECT_NE(error(header + "rank,stage,action,round,version_created,gradient_count,local_gradients\n5,0,STEP,0,1,1,1\n")
                .find("rank 5 is outside 0..1"),
            std::string::npos);
  EXPECT_NE(error("{\"format\": \"x\"}").find("field 'format'"), std::string::npos);
  EXPECT_NE(error("{").find("not valid JSON"), std::string::npos);
}

TEST(ScheduleFile, AFileForAnotherPlanIsRefused) {
  const ScheduleOptions o = options(parse_schedule_kind("1f1b-rr"), 4);
  const ScheduleFile file = export_schedule(Schedule(make_plan({1, 1, 1, 1}), o));
  try {
    checked_schedule(make_plan({2, 1, 1}), file, "f");
    FAIL() << "accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1 is in stage 1 in the schedule but in stage 0 in the plan"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pd
