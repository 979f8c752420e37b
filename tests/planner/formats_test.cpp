// Profile, topology and plan formats: round trips and malformed input.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "planner/plan.h"
#include "planner/topology.h"
#include "profiler/profile.h"
#include "tests/user_error_of.h"

namespace pd {
namespace {

std::string temp_path(const std::string& name) { return std::string(PD_BINARY_DIR) + "/test_planner_" + name; }

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

using testing_support::error_of;

TEST(Sha256, MatchesKnownDigests) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  // Lengths around the padding boundary (55, 56, 64 bytes).
  EXPECT_EQ(sha256_hex(std::string(55, 'a')), "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318");
  EXPECT_EQ(sha256_hex(std::string(56, 'a')), "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a");
  EXPECT_EQ(sha256_hex(std::string(64, 'a')), "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb");
}

Profile small_chain() {
  Profile p;
  p.model = "tiny";
  p.batch_size = 32;
  p.device = "cpu";
  for (int i = 0; i < 3; ++i) {
    ProfileNode n;
    n.id = i;
    n.name = "layer" + std::to_string(i);
    n.op = "linear";
    n.forward_ms = 1.5 + i;
    n.backward_ms = 2.25 * (i + 1);
    n.output_bytes = 1000 * (i + 1);
    n.activation_bytes = 2000 * (i + 1);
    n.parameter_bytes = 4096;
    n.optimizer_state_bytes = 4096;
    p.nodes.push_back(n);
  }
  p.edges = {{0, 1}, {1, 2}};
  return p;
}

TEST(ProfileJson, RoundTripsThroughTheWriter) {
  Profile p = small_chain();
  std::string path = temp_path("profile.json");
  write_profile_json(p, path);
  Profile q = read_profile(path);
  EXPECT_EQ(q.source_kind, ProfileSource::json);
  EXPECT_EQ(q.model, "tiny");
  EXPECT_EQ(q.batch_size, 32);
  ASSERT_EQ(q.nodes.size(), 3u);
  EXPECT_TRUE(q.is_chain());
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(q.nodes[i].name, p.nodes[i].name);
    EXPECT_DOUBLE_EQ(q.nodes[i].forward_ms, p.nodes[i].forward_ms);
    EXPECT_DOUBLE_EQ(q.nodes[i].backward_ms, p.nodes[i].backward_ms);
    EXPECT_EQ(q.nodes[i].output_bytes, p.nodes[i].output_bytes);
    EXPECT_EQ(q.nodes[i].activation_bytes, p.nodes[i].activation_bytes);
    EXPECT_EQ(q.nodes[i].parameter_bytes, p.nodes[i].parameter_bytes);
    EXPECT_EQ(q.nodes[i].optimizer_state_bytes, p.nodes[i].optimizer_state_bytes);
  }
  EXPECT_EQ(q.edges, p.edges);
  EXPECT_EQ(q.sha256.size(), 64u);
}

TEST(ProfileJson, MalformedInputNamesFileAndLine) {
  std::string bad_number =
      "{\"format\": \"pipedream-profile/1\", \"batch_size\": 8,\n"
      " \"nodes\": [\n"
      "  {\"id\": 0, \"forward_ms\": 1, \"backward_ms\": 1, \"output_bytes\": 1, \"activation_bytes\": 1, "
      "\"parameter_bytes\": 0},\n"
      "  {\"id\": 1, \"forward_ms\": \"fast\", \"backward_ms\": 1, \"output_bytes\": 1, \"activation_bytes\": 1, "
      "\"parameter_bytes\": 0}],\n"
      " \"edges\": [[0, 1]]}\n";
  EXPECT_NE(error_of([&] { parse_profile_json(bad_number, "p.json"); }).find("p.json:4"), std::string::npos);
  std::string unknown = bad_number;
  unknown.replace(unknown.find("\"fast\""), 6, "2");
  unknown.replace(unknown.find("[[0, 1]]"), 8, "[[0, 7]]");
  auto msg = error_of([&] { parse_profile_json(unknown, "p.json"); });
  EXPECT_NE(msg.find("p.json:5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown node 7"), std::string::npos) << msg;
  std::string cycle = unknown;
  cycle.replace(cycle.find("[[0, 7]]"), 8, "[[0, 1], [1, 0]]");
  EXPECT_NE(error_of([&] { parse_profile_json(cycle, "p.json"); }).find("cycle"), std::string::npos);
  std::string apart = unknown;
  apart.replace(apart.find("[[0, 7]]"), 8, "[]");
  EXPECT_NE(error_of([&] { parse_profile_json(apart, "p.json"); }).find("node 1 is not connected to node 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_profile_json("{\"format\": \"pipedream-profile/1\",\n \"batch_size\": 4, "
                                              "\"nodes\": [], \"edges\": []}",
                                              "p.json"); })
                .find("empty"),
            std::string::npos);
  EXPECT_NE(error_of([&] { parse_profile_json("{\n\"format\": ,}", "p.json"); }).find("p.json:2"), std::string::npos);
}

TEST(GraphTxt, ParsesListsOrdersTopologicallyAndKeepsFileLines) {
  std::string text =
      "node3 -- Linear -- forward_compute_time=1.000, backward_compute_time=2.000, activation_size=[10.0; 5.0], "
      "parameter_size=8.000\n"
      "node1 -- Input -- forward_compute_time=9.000, backward_compute_time=0.000, activation_size=4.0, "
      "parameter_size=0.000\n"
      "node2 -- ReLU -- forward_compute_time=0.500, backward_compute_time=0.250, activation_size=4.0, "
      "parameter_size=0.000 -- stage_id=0\n"
      "\tnode1 -- node2\n"
      "\tnode2 -- node3\n";
  Profile p = parse_graph_txt(text, "g.txt");
  ASSERT_EQ(p.nodes.size(), 3u);
  EXPECT_EQ(p.nodes[0].id, 1);
  EXPECT_EQ(p.nodes[1].id, 2);
  EXPECT_EQ(p.nodes[2].id, 3);
  EXPECT_EQ(p.nodes[2].output_bytes, 15u);
  EXPECT_EQ(p.nodes[2].source_line, 1);
  EXPECT_EQ(p.nodes[0].name, "Input");
  EXPECT_TRUE(p.is_chain());
}

TEST(GraphTxt, MalformedInputNamesFileAndLine) {
  std::string good =
      "node1 -- A -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=0\n"
      "node2 -- B -- forward_compute_time=1, backward_compute_time=1, activation_size=1, parameter_size=0\n";
  auto bad_number = good;
  bad_number.replace(bad_number.find("forward_compute_time=1", 60), 22, "forward_compute_time=x");
  EXPECT_NE(error_of([&] { parse_graph_txt(bad_number, "g.txt"); }).find("g.txt:2"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_graph_txt(good + "\tnode1 -- node9\n", "g.txt"); }).find("g.txt:3"),
            std::string::npos);
  auto cyc = error_of([&] { parse_graph_txt(good + "\tnode1 -- node2\n\tnode2 -- node1\n", "g.txt"); });
  EXPECT_NE(cyc.find("cycle"), std::string::npos) << cyc;
  EXPECT_NE(cyc.find("g.txt:"), std::string::npos) << cyc;
  // Two nodes and no edge between them: an edge is missing, not a pipeline.
  auto apart = error_of([&] { parse_graph_txt(good, "g.txt"); });
  EXPECT_NE(apart.find("g.txt:2: node 2 is not connected to node 1"), std::string::npos) << apart;
  EXPECT_NE(error_of([&] { parse_graph_txt("garbage line\n", "g.txt"); }).find("g.txt:1"), std::string::npos);
  EXPECT_NE(error_of([&] { parse_graph_txt("\n\n", "g.txt"); }).find("empty"), std::string::npos);
}

TEST(GraphTxt, ReadsEveryReferenceProfile) {
  for (const char* model : {"alexnet", "vgg16", "resnet18", "resnet50", "gnmt"}) {
    Profile p = read_profile(std::string(PD_SOURCE_DIR) + "/tests/data/pipedream-profiles/" + model + "/graph.txt");
    EXPECT_EQ(p.source_kind, ProfileSource::graph_txt);
    EXPECT_GT(p.nodes.size(), 10u) << model;
  }
}

TEST(Topology, SizesLevelsAndBandwidths) {
  EXPECT_EQ(parse_size("4000000000"), 4000000000ull);
  EXPECT_EQ(parse_size("4GB"), 4000000000ull);
  EXPECT_EQ(parse_size("16GiB"), 17179869184ull);
  EXPECT_EQ(parse_size("512MB"), 512000000ull);
  EXPECT_EQ(parse_size("1.5GB"), 1500000000ull);
  EXPECT_THROW(parse_size("lots"), UserError);
  EXPECT_THROW(parse_size("4XB"), UserError);
  std::string path = temp_path("topology.json");
  write_file(path,
             R"({"levels": [{"count": 8, "bandwidth_GBps": 150}, {"count": 4, "bandwidth_GBps": 3.125}],
                 "worker_memory_bytes": "80GB"})");
  Topology t = read_topology(path);
  EXPECT_EQ(t.total_workers(), 32);
  EXPECT_EQ(t.worker_memory_bytes, 80000000000ull);
  EXPECT_EQ(t.bandwidth_between(0, 7), 150);
  EXPECT_EQ(t.bandwidth_between(7, 8), 3.125);
  EXPECT_EQ(t.group_bandwidth({0, 1, 2}), 150);
  EXPECT_EQ(t.group_bandwidth({0, 1, 9}), 3.125);
  write_file(path, R"({"levels": [{"count": 0, "bandwidth_GBps": 1}]})");
  EXPECT_THROW(read_topology(path), UserError);
  EXPECT_THROW(flat_topology(0, 1.0), UserError);
}

Plan sample_plan() {
  Plan p;
  p.profile = {"vgg16.json", std::string(64, 'a'), "vgg16", "cuda", 64};
  p.topology = flat_topology(8, 1.25);
  p.config = "7-1";
  p.noam = 2;
  p.state_space = StateSpaceKind::chain;
  PlanStage a;
  a.index = 0, a.first_layer = 0, a.last_layer = 3, a.replicas = 7, a.ranks = {0, 1, 2, 3, 4, 5, 6};
  a.layer_names = {"a", "b", "c", "d"};
  a.forward_s = 0.25, a.backward_s = 0.5, a.compute_s = 0.75, a.output_bytes = 123456, a.parameter_bytes = 99;
  a.time_s = 0.1, a.in_flight = 2, a.memory_bytes = 777;
  PlanStage b;
  b.index = 1, b.first_layer = 4, b.last_layer = 5, b.replicas = 1, b.ranks = {7};
  b.nodes = {4, 5};
  p.stages = {a, b};
  p.time_per_minibatch_s = 0.1;
  return p;
}

TEST(PlanFormat, RoundTripsAndAnswersRankQueries) {
  Plan p = sample_plan();
  std::string path = temp_path("plan.json");
  write_plan(p, path);
  Plan q = read_plan(path);
  EXPECT_EQ(q.config, "7-1");
  EXPECT_EQ(q.workers(), 8);
  EXPECT_EQ(q.stage_of_rank(6), 0);
  EXPECT_EQ(q.stage_of_rank(7), 1);
  EXPECT_THROW(q.stage_of_rank(8), UserError);
  EXPECT_EQ(q.state_space, StateSpaceKind::chain);
  EXPECT_EQ(q.topology.total_workers(), 8);
  ASSERT_EQ(q.stages.size(), 2u);
  EXPECT_EQ(q.stages[0].output_bytes, 123456u);
  EXPECT_EQ(q.stages[0].parameter_bytes, 99u);
  EXPECT_DOUBLE_EQ(q.stages[0].forward_s, 0.25);
  EXPECT_DOUBLE_EQ(q.stages[0].backward_s, 0.5);
  EXPECT_EQ(q.stages[0].in_flight, 2);
  EXPECT_EQ(q.stages[1].nodes, (std::vector<int>{4, 5}));
  EXPECT_EQ(plan_to_json(q), plan_to_json(p));
  EXPECT_EQ(config_string({7, 1}), "7-1");
}

TEST(PlanFormat, RejectsInconsistentPlans) {
  auto j = plan_to_json(sample_plan());
  auto broken = j;
  broken["stages"][1]["ranks"] = {6};
  EXPECT_NE(error_of([&] { plan_from_json(broken, "x.json"); }).find("rank 6"), std::string::npos);
  broken = j;
  broken["stages"][1]["layers"] = {5, 5};
  EXPECT_THROW(plan_from_json(broken, "x.json"), UserError);
  broken = j;
  broken["stages"][0]["replicas"] = 6;
  EXPECT_THROW(plan_from_json(broken, "x.json"), UserError);
  broken = j;
  broken["config"] = "6-2";
  EXPECT_THROW(plan_from_json(broken, "x.json"), UserError);
}

// Recomputed layers (docs/design.md §5): kept through the file, in the
// stages' fingerprint, and refused outside the stage or out of order.
TEST(PlanFormat, RecomputedLayersRoundTripAndStayInTheirStage) {
  Plan p = sample_plan();
  p.stages[0].recompute_layers = {1, 3};
  p.stages[0].recompute_s = 0.125;
  const Plan q = plan_from_json(plan_to_json(p), "x.json");
  EXPECT_EQ(q.stages[0].recompute_layers, (std::vector<int>{1, 3}));
  EXPECT_DOUBLE_EQ(q.stages[0].recompute_s, 0.125);
  EXPECT_TRUE(q.stages[1].recompute_layers.empty());
  EXPECT_EQ(recompute_flags(q.stages[0]), (std::vector<bool>{false, true, false, true}));
  EXPECT_TRUE(recompute_flags(q.stages[1]).empty());
  EXPECT_NE(stage_fingerprint(q), stage_fingerprint(sample_plan()));
  auto j = plan_to_json(p);
  for (const std::vector<int>& bad : {std::vector<int>{4}, std::vector<int>{3, 1}, std::vector<int>{1, 1}}) {
    auto broken = j;
    broken["stages"][0]["recompute_layers"] = bad;
    EXPECT_NE(error_of([&] { plan_from_json(broken, "x.json"); }).find("recompute_layers"), std::string::npos);
  }
}

}  // namespace
}  // namespace pd
