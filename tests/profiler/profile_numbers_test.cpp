// Numbers in profile.json and graph.txt that used to wrap or be cast: each
// is a UserError naming the file, the field and the value.
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "core/error.h"
#include "profiler/profile.h"
#include "tests/user_error_of.h"

namespace pd {
namespace {

using testing_support::error_of;

// A two-node chain profile with `node1` spliced into the second node, last
// (a repeated key's last value is the one read).
std::string profile_with(const std::string& top, const std::string& node1) {
  return R"({"format": "pipedream-profile/1", "model": "m", "batch_size": 4)" + top + R"(, "nodes": [
  {"id": 0, "forward_ms": 1, "backward_ms": 2, "output_bytes": 8, "activation_bytes": 8, "parameter_bytes": 4},
  {"forward_ms": 1, "backward_ms": 2, "output_bytes": 8, "activation_bytes": 8, "parameter_bytes": 4, )" + node1 + R"(}],
  "edges": [[0, 1]]})";
}

TEST(ProfileNumbers, ValidProfileStillReads) {
  Profile p = parse_profile_json(profile_with("", R"("id": 1)"), "p.json");
  EXPECT_EQ(p.nodes.size(), 2u);
  EXPECT_EQ(p.nodes[1].parameter_bytes, 4u);
}

TEST(ProfileNumbers, JsonIntegersThatWrapAreRefused) {
  struct Case {
    std::string top, node1, field, value;
  };
  const Case cases[] = {
      {"", R"("id": 4294967297)", "\"id\"", "4294967297"},                  // 2^32 + 1 read as 1
      {"", R"("id": 1, "parameter_bytes": 1180591620717411303424)", "\"parameter_bytes\"", "1.1805916207174113e+21"},
      {"", R"("id": 1, "output_bytes": 5.5)", "\"output_bytes\"", "5.5"},
      {R"(, "batch_size": 4294967300)", R"("id": 1)", "\"batch_size\"", "4294967300"},
      {R"(, "threads": 1e300)", R"("id": 1)", "\"threads\"", "1e+300"},
      {R"(, "model": 7)", R"("id": 1)", "\"model\"", "7"},  // was type_error.302 in the plan reader's style
  };
  for (const Case& c : cases) {
    std::string text = profile_with(c.top, c.node1);
    if (c.top.find("batch_size") != std::string::npos) text.replace(text.find("\"batch_size\": 4,"), 16, "");
    const std::string msg = error_of([&] { parse_profile_json(text, "p.json"); });
    EXPECT_NE(msg.find("p.json"), std::string::npos) << msg;
    EXPECT_NE(msg.find(c.field), std::string::npos) << c.field << ": " << msg;
    EXPECT_NE(msg.find(c.value), std::string::npos) << c.value << ": " << msg;
  }
}

// A node's times at smaller batches (profile --microbatches): read back as
// written; a batch that is not below the profile's, out of order, or an
// entry without its times is refused, naming the node.
TEST(ProfileNumbers, AtBatchTimesReadAndBadOnesAreRefused) {
  const Profile p = parse_profile_json(
      profile_with("", R"("id": 1, "at_batch": [{"batch": 1, "forward_ms": 0.5, "backward_ms": 0.75},
                                               {"batch": 2, "forward_ms": 0.625, "backward_ms": 1}])"),
      "p.json");
  ASSERT_EQ(p.nodes[1].at_batch.size(), 2u);
  EXPECT_EQ(p.nodes[1].at_batch[1].batch, 2);
  EXPECT_DOUBLE_EQ(p.nodes[1].at_batch[1].forward_ms, 0.625);
  EXPECT_DOUBLE_EQ(p.nodes[1].at_batch[0].backward_ms, 0.75);
  EXPECT_TRUE(p.measured_microbatch_sizes().empty()) << "node 0 has no at_batch times";
  const std::pair<std::string, std::string> bad[] = {
      {R"("at_batch": [{"batch": 4, "forward_ms": 1, "backward_ms": 1}])", "batch_size 4"},
      {R"("at_batch": [{"batch": 0, "forward_ms": 1, "backward_ms": 1}])", "between 1"},
      {R"("at_batch": [{"batch": 2, "forward_ms": 1, "backward_ms": 1}, {"batch": 1, "forward_ms": 1, "backward_ms": 1}])",
       "ascending"},
      {R"("at_batch": [{"batch": 2, "forward_ms": 1}])", "backward_ms"},
      {R"("at_batch": [{"batch": 2, "forward_ms": -1, "backward_ms": 1}])", "forward_ms"},
      {R"("at_batch": {"batch": 2})", "at_batch"},
  };
  for (const auto& [field, message] : bad) {
    const std::string msg = error_of([&] { parse_profile_json(profile_with("", R"("id": 1, )" + field), "p.json"); });
    EXPECT_NE(msg.find("node 1"), std::string::npos) << field << ": " << msg;
    EXPECT_NE(msg.find(message), std::string::npos) << field << ": " << msg;
  }
}

TEST(ProfileNumbers, JsonEdgeIdsThatWrapAreRefused) {
  std::string text = profile_with("", R"("id": 1)");
  text.replace(text.find("[[0, 1]]"), 8, "[[0, 4294967297]]");
  const std::string msg = error_of([&] { parse_profile_json(text, "p.json"); });
  EXPECT_NE(msg.find("edges[0][1]"), std::string::npos) << msg;
}

TEST(ProfileNumbers, GraphTxtSizesThatDoNotFitAreRefused) {
  const std::string ok = "node1 -- Linear -- forward_compute_time=1.0, backward_compute_time=2.0, "
                         "activation_size=100.0, parameter_size=40.0\n";
  EXPECT_EQ(parse_graph_txt(ok, "g.txt").nodes[0].parameter_bytes, 40u);
  for (const char* field : {"activation_size", "parameter_size"}) {
    std::string text = ok;
    const size_t at = text.find(std::string(field) + "=") + std::string(field).size() + 1;
    text.replace(at, text.find_first_of(",\n", at) - at, "1e30");
    const std::string msg = error_of([&] { parse_graph_txt(text, "g.txt"); });
    EXPECT_NE(msg.find("g.txt:1"), std::string::npos) << msg;
    EXPECT_NE(msg.find(field), std::string::npos) << msg;
    EXPECT_NE(msg.find("1e+30"), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace pd
