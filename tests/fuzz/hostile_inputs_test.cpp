// Hostile files for every reader, case by case: JSON nested 70,000 levels
// deep in each field that used to overflow the stack, devices, FIFOs,
// folders and oversized files, and counts that asked for terabytes. Each is
// a UserError naming the file and the field (or what the file is), before
// any recursion or allocation.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "core/input_file.h"
#include "core/safetensors.h"
#include "models/model.h"
#include "planner/plan.h"
#include "planner/topology.h"
#include "profiler/profile.h"
#include "runtime/checkpoint.h"
#include "runtime/schedule/schedule_file.h"
#include "tests/fuzz/mutator.h"

namespace pd::fuzz {
namespace {

namespace fs = std::filesystem;

fs::path scratch() {
  static const fs::path dir = [] {
    const fs::path d = fs::temp_directory_path() / ("pd_hostile_" + std::to_string(::getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
  }();
  return dir;
}

// 70,000 levels: between 50,000 and 70,000 an unguarded reader crashed.
std::string deep_array(size_t depth = 70000) { return std::string(depth, '[') + "0" + std::string(depth, ']'); }

std::string with_value(std::string text, const std::string& value) {
  const size_t at = text.find('@');
  EXPECT_NE(at, std::string::npos);
  return text.replace(at, 1, value);
}

// The message of the UserError `read` throws, or a description of what
// happened instead.
std::string user_error_of(const std::function<void()>& read) {
  try {
    read();
  } catch (const UserError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("not a UserError: ") + e.what();
  }
  return "accepted";
}

using Reader = std::function<void(const std::string& path)>;

const Reader kModelSpec = [](const std::string& p) { load_model_spec(p); };
const Reader kProfile = [](const std::string& p) { read_profile(p); };
const Reader kPlan = [](const std::string& p) { read_plan(p); };
const Reader kTopology = [](const std::string& p) { read_topology(p); };
const Reader kSchedule = [](const std::string& p) { read_schedule_file(p); };
const Reader kSafetensors = [](const std::string& p) { load_safetensors(p); };

const char* kSpecName = R"({"name": @, "input": {"shape": [4]}, "classes": 2,
  "layers": [{"type": "linear", "out_features": 2}]})";
const char* kSpecDescription = R"({"name": "m", "description": @, "input": {"shape": [4]}, "classes": 2,
  "layers": [{"type": "linear", "out_features": 2}]})";
const char* kSpecClasses = R"({"input": {"shape": [4]}, "classes": @,
  "layers": [{"type": "linear", "out_features": 2}]})";
const char* kSpecKernel = R"({"input": {"shape": [1, 8, 8]}, "classes": 2,
  "layers": [{"type": "conv2d", "out_channels": 2, "kernel": @}, {"type": "flatten"},
             {"type": "linear", "out_features": 2}]})";
const char* kProfileWith = R"({"format": @@, "model": @@, "batch_size": 4, "nodes": [
  {"id": 0, "name": @@, "forward_ms": @@, "backward_ms": 2, "output_bytes": 8, "activation_bytes": 8,
   "parameter_bytes": 4},
  {"id": 1, "name": "fc2", "forward_ms": 1, "backward_ms": 2, "output_bytes": 8, "activation_bytes": 8,
   "parameter_bytes": 4}], "edges": @@})";
const char* kPlanWith = R"({"format": @@, "config": @@, "schedule": @@, "stages": [
  {"index": 0, "layers": @@, "replicas": @@, "ranks": [0]}]})";
const char* kTopologyWith = R"({"worker_memory_bytes": @@, "levels": [{"count": @@, "bandwidth_GBps": @@}]})";

// The template with the k-th "@@" set to `value` and the others to their
// valid values.
std::string fill(std::string text, size_t k, const std::string& value, const std::vector<std::string>& valid) {
  for (size_t i = 0; i < valid.size(); ++i) {
    const size_t at = text.find("@@");
    text.replace(at, 2, i == k ? value : valid[i]);
  }
  return text;
}

struct DeepCase {
  std::string name;
  Reader read;
  std::string text;   // the file, with one field nested deep
  std::string field;  // the field the message must name
};

std::vector<DeepCase> deep_cases() {
  const std::string deep = deep_array();
  std::vector<DeepCase> cases = {
      {"spec-name", kModelSpec, with_value(kSpecName, deep), "field 'name[0]"},
      {"spec-description", kModelSpec, with_value(kSpecDescription, deep), "field 'description[0]"},
      {"spec-classes", kModelSpec, with_value(kSpecClasses, deep), "field 'classes[0]"},
      {"spec-kernel", kModelSpec, with_value(kSpecKernel, deep), "field 'layers[0].kernel[0]"},
  };
  const std::vector<std::string> profile_valid = {"\"pipedream-profile/1\"", "\"m\"", "\"fc1\"", "1", "[[0, 1]]"};
  const std::vector<std::string> profile_fields = {"format", "model", "nodes[0].name", "nodes[0].forward_ms", "edges"};
  for (size_t k = 0; k < profile_valid.size(); ++k)
    cases.push_back({"profile-" + profile_fields[k], kProfile, fill(kProfileWith, k, deep, profile_valid),
                     "field '" + profile_fields[k] + (k == 4 ? "" : "[0]")});
  const std::vector<std::string> plan_valid = {"\"pipedream-plan/1\"", "\"1\"", "\"1f1b-rr\"", "[0, 1]", "1"};
  const std::vector<std::string> plan_fields = {"format", "config", "schedule", "stages[0].layers",
                                                "stages[0].replicas"};
  for (size_t k = 0; k < plan_valid.size(); ++k)
    cases.push_back({"plan-" + plan_fields[k], kPlan, fill(kPlanWith, k, deep, plan_valid),
                     "field '" + plan_fields[k] + (k == 3 ? "" : "[0]")});
  const std::vector<std::string> topology_valid = {"1000000", "4", "10"};
  const std::vector<std::string> topology_fields = {"worker_memory_bytes", "levels[0].count",
                                                    "levels[0].bandwidth_GBps"};
  for (size_t k = 0; k < topology_valid.size(); ++k)
    cases.push_back({"topology-" + topology_fields[k], kTopology, fill(kTopologyWith, k, deep, topology_valid),
                     "field '" + topology_fields[k] + "[0]"});
  cases.push_back({"schedule-minibatches", kSchedule,
                   with_value(R"({"format": "pipedream-schedule/1", "schedule": "1f1b-rr", "minibatches": @,
                                 "workers": []})", deep),
                   "field 'minibatches[0]"});
  return cases;
}

TEST(HostileInputs, DeepJsonInEveryReaderIsRefusedNamingTheField) {
  for (const DeepCase& c : deep_cases()) {
    const std::string path = (scratch() / (c.name + ".json")).string();
    write_bytes(path, c.text);
    const std::string e = user_error_of([&] { c.read(path); });
    EXPECT_NE(e.find(c.field), std::string::npos) << c.name << ": " << e.substr(0, 300);
    EXPECT_NE(e.find("deeper than 64"), std::string::npos) << c.name << ": " << e.substr(0, 300);
    EXPECT_NE(e.find(path), std::string::npos) << c.name << ": " << e.substr(0, 300);
  }
}

TEST(HostileInputs, DeepSafetensorsHeaderIsRefused) {
  for (const std::string field : {"dtype", "shape"}) {
    std::string header = R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
    const std::string valid = field == "dtype" ? "\"F32\"" : "[2]";
    header.replace(header.find(valid), valid.size(), deep_array());
    const std::string path = (scratch() / ("deep-" + field + ".safetensors")).string();
    const uint64_t n = header.size();
    std::string bytes(reinterpret_cast<const char*>(&n), 8);
    write_bytes(path, bytes + header + std::string(8, '\0'));
    const std::string e = user_error_of([&] { load_safetensors(path); });
    EXPECT_NE(e.find("field 'w." + field + "[0]"), std::string::npos) << e.substr(0, 300);
  }
}

TEST(HostileInputs, DeepCheckpointStateIsRefused) {
  for (const std::string field : {"model", "step"}) {
    const fs::path root = scratch() / ("ckpt-" + field);
    fs::create_directories(root / "step-4");
    write_bytes((root / "latest").string(), "step-4\n");
    std::string state = R"({"format": "pipedream-checkpoint/1", "step": 4, "checkpoint_every": 4,
      "layers": [[0, 7]], "model": "mlp", "batch": 8, "seed": 0})";
    const std::string valid = field == "model" ? "\"mlp\"" : "4";
    state.replace(state.find(valid, state.find("\"" + field + "\"")), valid.size(), deep_array());
    write_bytes((root / "step-4" / "state.json").string(), state);
    const std::string e = user_error_of([&] { find_checkpoint(root.string()); });
    EXPECT_NE(e.find("field '" + field + "[0]"), std::string::npos) << e.substr(0, 300);
  }
}

TEST(HostileInputs, JsonDepthLimitIsExactly64) {
  EXPECT_NO_THROW(check_json_depth(deep_array(64), "f.json"));
  EXPECT_THROW(check_json_depth(deep_array(65), "f.json"), UserError);
  // Brackets inside strings (escaped quotes included) do not count.
  EXPECT_NO_THROW(check_json_depth("{\"a\": \"" + std::string(1000, '[') + "\\\"" + std::string(1000, '{') + "\"}",
                                   "f.json"));
  const std::string e = user_error_of([] { check_json_depth("{\"a\": 1,\n \"b\": [1, " + deep_array(100), "f.json"); });
  EXPECT_NE(e.find("f.json:2: field 'b[1][0]"), std::string::npos) << e;
}

// /dev/zero and /dev/urandom used to be read until memory ran out; a FIFO
// would block; a folder failed with "basic_filebuf::underflow".
TEST(HostileInputs, DevicesFifosAndFoldersAreRefusedBeforeReading) {
  const std::string fifo = (scratch() / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string folder = (scratch() / "folder").string();
  fs::create_directories(folder);
  const std::vector<std::pair<std::string, Reader>> readers = {
      {"model spec", kModelSpec}, {"profile", kProfile},   {"plan", kPlan},
      {"topology", kTopology},    {"schedule", kSchedule}, {"safetensors", kSafetensors}};
  for (const auto& [name, read] : readers) {
    for (const std::string device : {"/dev/zero", "/dev/urandom", fifo.c_str()}) {
      const std::string e = user_error_of([&] { read(device); });
      EXPECT_NE(e.find(device + ": "), std::string::npos) << name << " " << device << ": " << e;
      EXPECT_NE(e.find("is not a regular file"), std::string::npos) << name << " " << device << ": " << e;
    }
    const std::string e = user_error_of([&] { read(folder); });
    EXPECT_NE(e.find("is a folder"), std::string::npos) << name << ": " << e;
  }
}

TEST(HostileInputs, OversizedTextFilesAreRefusedBeforeReading) {
  const std::string path = (scratch() / "huge.json").string();
  write_bytes(path, "{");
  fs::resize_file(path, kMaxTextInputBytes + 1);  // sparse: no disk used
  for (const Reader& read : {kPlan, kProfile, kModelSpec, kTopology, kSchedule}) {
    const std::string e = user_error_of([&] { read(path); });
    EXPECT_NE(e.find("at most 268.44 MB is accepted"), std::string::npos) << e;
  }
  fs::remove(path);
}

TEST(HostileInputs, ScheduleCountsThatCannotBeAllocatedAreRefusedNamingTheField) {
  const std::string header = "# pipedream-schedule/1 schedule=1f1b-rr weights=stash ";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"microbatches=1 minibatches=9223372036854775807 workers=1", "field 'minibatches'"},
      {"microbatches=1 minibatches=4 workers=4294967296", "field 'workers'"},
      {"microbatches=4294967297 minibatches=1 workers=1", "field 'microbatches'"},
      {"microbatches=16777216 minibatches=16777216 workers=1", "'minibatches' x 'microbatches'"},
      {"microbatches=1 minibatches=1 workers=1 virtual_stages=256", "field 'virtual_stages'"}};
  for (const auto& [fields, want] : cases) {
    const std::string e = user_error_of([&] { parse_schedule(header + fields + "\nrank,stage,action\n", "s.csv"); });
    EXPECT_NE(e.find(want), std::string::npos) << fields << ": " << e;
  }
  const std::string e = user_error_of([] {
    parse_schedule(R"({"format": "pipedream-schedule/1", "schedule": "1f1b-rr", "minibatches": 9223372036854775807,
                       "workers": []})", "s.json");
  });
  EXPECT_NE(e.find("field 'minibatches'"), std::string::npos) << e;
}

}  // namespace
}  // namespace pd::fuzz
