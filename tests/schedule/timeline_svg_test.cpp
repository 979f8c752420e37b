// The paper-style timeline picture: well-formed XML, one row per worker,
// boxes labelled with their minibatch numbers.
#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "runtime/simulator/timeline_svg.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

using testing::make_plan;

// A tiny well-formedness check: every tag closes in order, attribute
// values are quoted, text holds no raw '<' or unescaped '&'. Returns the
// first problem, or "" when the document is well formed.
std::string xml_problem(const std::string& doc) {
  std::vector<std::string> open;
  size_t i = 0;
  int roots = 0;
  while (i < doc.size()) {
    if (doc[i] != '<') {
      if (doc[i] == '&') {
        const size_t semi = doc.find(';', i);
        if (semi == std::string::npos || semi - i > 8) return "raw & at " + std::to_string(i);
      }
      ++i;
      continue;
    }
    const size_t close = doc.find('>', i);
    if (close == std::string::npos) return "unclosed tag at " + std::to_string(i);
    std::string tag = doc.substr(i + 1, close - i - 1);
    i = close + 1;
    if (tag.empty()) return "empty tag";
    if (tag[0] == '?' || tag[0] == '!') continue;
    if (tag[0] == '/') {
      if (open.empty() || open.back() != tag.substr(1)) return "</" + tag.substr(1) + "> closes nothing open";
      open.pop_back();
      continue;
    }
    if (std::count(tag.begin(), tag.end(), '"') % 2 != 0) return "unbalanced quotes in <" + tag + ">";
    if (open.empty()) ++roots;
    const bool self_closing = tag.back() == '/';
    const std::string name = tag.substr(0, tag.find_first_of(" /"));
    if (!self_closing) open.push_back(name);
  }
  if (!open.empty()) return "<" + open.back() + "> never closed";
  if (roots != 1) return std::to_string(roots) + " root elements";
  return "";
}

int count(const std::string& doc, const std::string& what) {
  int n = 0;
  for (size_t at = doc.find(what); at != std::string::npos; at = doc.find(what, at + 1)) ++n;
  return n;
}

std::set<int> labels(const std::string& doc) {
  std::set<int> out;
  const std::regex label("<text class=\"label\"[^>]*>([0-9]+)</text>");
  for (std::sregex_iterator it(doc.begin(), doc.end(), label), end; it != end; ++it) out.insert(std::stoi((*it)[1]));
  return out;
}

std::string picture(const Plan& plan, const ScheduleKind* kind, int64_t minibatches, int microbatches, int64_t window) {
  SimulationOptions o;
  o.schedule.kind = kind;
  o.schedule.minibatches = minibatches;
  o.schedule.microbatches = microbatches;
  o.record_trace = true;
  std::vector<TraceEvent> events;
  simulate(plan, o, &events);
  TimelineSvgOptions svg;
  svg.minibatches = window;
  svg.flush = microbatches > 1;
  svg.title = "a <test> & title";
  std::ostringstream os;
  write_timeline_svg(os, plan, events, svg);
  return os.str();
}

TEST(TimelineSvg, OneRowPerWorkerAndEveryMinibatchOfTheWindowLabelled) {
  const std::string doc = picture(make_plan({1, 1, 1, 1}), parse_schedule_kind("1f1b-rr"), 40, 1, 10);
  EXPECT_EQ(xml_problem(doc), "");
  EXPECT_EQ(count(doc, "class=\"row\""), 4);
  EXPECT_EQ(count(doc, "class=\"worker\""), 4);
  const std::set<int> shown = labels(doc);
  for (int m = 0; m < 10; ++m) EXPECT_TRUE(shown.count(m)) << "minibatch " << m;
  EXPECT_FALSE(shown.count(30)) << "minibatch 30 starts after the window";
  EXPECT_GT(count(doc, "class=\"F\""), 0);
  EXPECT_GT(count(doc, "class=\"B\""), 0);
  EXPECT_NE(doc.find("a &lt;test&gt; &amp; title"), std::string::npos);
  for (const char* legend : {">forward<", ">backward<", ">all-reduce<", ">idle<"})
    EXPECT_NE(doc.find(legend), std::string::npos) << legend;
}

TEST(TimelineSvg, FlushSchedulesLabelMicrobatchesAndReplicasShowAllReduces) {
  const std::string doc = picture(make_plan({2, 1, 1}, 1.0, 2.0, 0, 4000), parse_schedule_kind("1f1b-flush"), 4, 6, 2);
  EXPECT_EQ(xml_problem(doc), "");
  EXPECT_EQ(count(doc, "class=\"row\""), 4);
  EXPECT_EQ(labels(doc), (std::set<int>{0, 1, 2, 3, 4, 5}));
  // Both replicas of stage 0 draw each all-reduce.
  EXPECT_GT(count(doc, "class=\"allreduce\""), 0);
  EXPECT_EQ(count(doc, "class=\"allreduce\"") % 2, 0);
}

TEST(TimelineSvg, SixteenWorkersStayReadable) {
  const std::string doc = picture(make_plan(std::vector<int>(16, 1)), parse_schedule_kind("1f1b-rr"), 64, 1, 34);
  EXPECT_EQ(xml_problem(doc), "");
  EXPECT_EQ(count(doc, "class=\"row\""), 16);
  const std::set<int> shown = labels(doc);
  for (int m = 0; m < 34; ++m) EXPECT_TRUE(shown.count(m)) << "minibatch " << m;
}

// The simulated picture of a schedule that runs several stages per worker,
// rows named from the built schedule's placement; `chrome_trace`: also the
// Chrome trace of the same events.
std::string placed_picture(const Plan& plan, const ScheduleOptions& schedule, std::string* chrome_trace = nullptr) {
  SimulationOptions o;
  o.schedule = schedule;
  o.record_trace = true;
  std::vector<TraceEvent> events;
  simulate(plan, o, &events);
  TimelineSvgOptions svg;
  svg.flush = true;
  svg.worker_stages = Schedule(plan, schedule).stages_by_worker();
  std::ostringstream os;
  write_timeline_svg(os, plan, events, svg);
  if (chrome_trace) {
    std::ostringstream trace;
    write_chrome_trace(trace, plan, events, schedule);
    *chrome_trace = trace.str();
  }
  return os.str();
}

// A label is drawn right-aligned ending at its x: the margin must hold it
// whole (7 px per character at font-size 11), however long the label.
TEST(TimelineSvg, LongWorkerLabelsFitLeftOfTheRows) {
  const Plan plan = make_plan(std::vector<int>(12, 1));
  const std::string doc = placed_picture(
      plan, testing::schedule_options(parse_schedule_kind("interleaved-1f1b"), 2, 4, WeightPolicy::Stash, 3));
  EXPECT_EQ(xml_problem(doc), "");
  const std::regex label("<text class=\"worker\" x=\"([0-9.]+)\"[^>]*>([^<]*)</text>");
  int rows = 0;
  for (std::sregex_iterator it(doc.begin(), doc.end(), label), end; it != end; ++it, ++rows) {
    const std::string text = (*it)[2];
    const double chars = static_cast<double>(text.size()) - 1;  // the middle dot is 2 bytes
    EXPECT_GE(std::stod((*it)[1]), 7 * chars) << "'" << text << "' is cut at the left edge";
  }
  EXPECT_EQ(rows, 4);
  EXPECT_NE(doc.find("worker 3 \xC2\xB7 stages 3,7,11"), std::string::npos);
}

TEST(TimelineSvg, TheWellFormednessCheckCatchesBrokenXml) {
  EXPECT_NE(xml_problem("<svg><g></svg>"), "");
  EXPECT_NE(xml_problem("<svg>a & b</svg>"), "");
  EXPECT_NE(xml_problem("<svg x=\"1></svg>"), "");
  EXPECT_EQ(xml_problem("<?xml version=\"1.0\"?><svg><g/><text>1 &amp; 2</text></svg>"), "");
}

// A V shape's rows name the stages where the built schedule places them:
// worker w runs stages w and 2p - 1 - w (the SVG and the Chrome trace).
TEST(TimelineSvg, VShapeRowsNameWhereTheScheduleRunsEachStage) {
  const Plan plan = make_plan(std::vector<int>(8, 1));
  const ScheduleOptions zb_v = testing::schedule_options(parse_schedule_kind("zb-v"), 2, 8);
  std::string trace;
  const std::string doc = placed_picture(plan, zb_v, &trace);
  EXPECT_EQ(xml_problem(doc), "");
  EXPECT_EQ(count(doc, "class=\"row\""), 4);
  for (const char* row : {"worker 0 \xC2\xB7 stages 0,7<", "worker 3 \xC2\xB7 stages 3,4<"})
    EXPECT_NE(doc.find(row), std::string::npos) << row;
  EXPECT_NE(trace.find("rank 0 (stages 0,7)"), std::string::npos);
  EXPECT_NE(trace.find("rank 2 (stages 2,5)"), std::string::npos);
}

}  // namespace
}  // namespace pd
