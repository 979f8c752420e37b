// Imported DAGs pipelined with cuts that carry several tensors: torchvision
// resnet18 cut inside residual blocks (the block input travels beside the
// branch) and densenet121 cut inside dense blocks (every earlier feature
// map travels), profiled per unit, planned on antichains, run under MPI.
// The runtime's equivalences hold on these stages as on chains: MPI equals
// --reference bit for bit (stashing, vertical sync, replication), the flush
// schedules (1f1b-flush, gpipe, zb-h1, interleaved-1f1b) equal `train
// --microbatches`, and a resumed run repeats the uninterrupted one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/safetensors.h"
#include "tests/onnx/onnx_test_util.h"

namespace pd::onnx {
namespace {

using pd::testing::read_text;

// Runs the CLI; on failure the test stops with the log.
void pipedream(const std::string& args, const std::string& log) {
  ASSERT_EQ(pd::testing::run_pipedream(args, log), 0) << args << "\n" << read_text(log);
}

// Parameters and buffers by initializer name: the layer prefix differs
// between the default layers (train) and one layer per stage (run).
std::map<std::string, Tensor> by_initializer(const std::string& path) {
  std::map<std::string, Tensor> out;
  for (auto& [name, t] : load_safetensors(path)) {
    if (name.rfind("optimizer.", 0) == 0) continue;
    out[name.substr(name.find('.') + 1)] = t;
  }
  return out;
}

// Largest |a - b| over all tensors (the same names required).
double max_difference(const std::string& a_path, const std::string& b_path) {
  const auto a = by_initializer(a_path), b = by_initializer(b_path);
  EXPECT_EQ(a.size(), b.size());
  double most = 0;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    EXPECT_NE(it, b.end()) << name;
    if (it == b.end()) continue;
    EXPECT_EQ(t.numel(), it->second.numel()) << name;
    for (int64_t i = 0; i < t.numel() && i < it->second.numel(); ++i)
      most = std::max(most, double(std::abs(t.f32()[i] - it->second.f32()[i])));
  }
  return most;
}

bool same_bits(const std::string& a, const std::string& b) { return read_text(a) == read_text(b) && !read_text(a).empty(); }

struct Exported {
  std::string dir, onnx;
  std::vector<std::string> units;  // the profile's nodes, in order
};

// Export at 32x32, batch 4, profile per unit (one quick iteration: the plan
// below is written by hand, so timings do not matter).
Exported export_and_profile(const std::string& model) {
  Exported e;
  e.dir = pd::testing::scratch_dir("dag_" + model);
  e.onnx = e.dir + "/" + model + ".onnx";
  EXPECT_TRUE(pd::testing::run_python("scripts/export_torch.py " + model + " -o " + e.onnx + " --input 3,32,32 --classes 10",
                                      e.dir + "/export.log"))
      << read_text(e.dir + "/export.log");
  pipedream("profile --model " + e.onnx + " --batch 4 --threads 1 --warmup 0 --iters 1 --min-time 0 -o " + e.dir +
                "/profile.json",
            e.dir + "/profile.log");
  const nlohmann::json p = nlohmann::json::parse(read_text(e.dir + "/profile.json"));
  for (const auto& n : p.at("nodes")) e.units.push_back(n.at("name").get<std::string>());
  return e;
}

// A plan whose stage s ends with the unit named ends[s] (the last stage
// with the last unit), stage s on ranks[s].
void write_plan(const Exported& e, const std::string& path, const std::vector<std::string>& ends,
                const std::vector<std::vector<int>>& ranks, const std::string& schedule) {
  nlohmann::json stages = nlohmann::json::array();
  int first = 0;
  for (size_t s = 0; s <= ends.size(); ++s) {
    int last = int(e.units.size()) - 1;
    if (s < ends.size()) {
      auto it = std::find(e.units.begin(), e.units.end(), ends[s]);
      ASSERT_NE(it, e.units.end()) << "no unit " << ends[s];
      last = int(it - e.units.begin());
    }
    std::vector<int> nodes;
    for (int u = first; u <= last; ++u) nodes.push_back(u);
    stages.push_back({{"index", s}, {"layers", {first, last}}, {"nodes", nodes}, {"replicas", ranks[s].size()},
                      {"ranks", ranks[s]}});
    first = last + 1;
  }
  std::string config;
  for (const auto& r : ranks) config += (config.empty() ? "" : "-") + std::to_string(r.size());
  const nlohmann::json plan = {{"format", "pipedream-plan/1"}, {"config", config}, {"schedule", schedule},
                               {"profile", {{"path", e.dir + "/profile.json"}, {"batch_size", 4}}}, {"stages", stages}};
  std::ofstream(path) << plan.dump(1);
}

// The tensors each stage sends, as `run` reports them.
std::vector<int> boundary_tensors(const std::string& log) {
  std::vector<int> out;
  const std::string t = read_text(log);
  const std::regex sends("sends ([0-9]+) tensor");
  for (auto it = std::sregex_iterator(t.begin(), t.end(), sends); it != std::sregex_iterator(); ++it)
    out.push_back(std::stoi((*it)[1]));
  return out;
}

TEST(OnnxDagPipeline, Resnet18CutInsideResidualBlocks) {
  PD_SKIP_WITHOUT_TORCH();
  const Exported e = export_and_profile("resnet18");
  ASSERT_FALSE(e.units.empty());
  const std::string& d = e.dir;
  // Cuts after a block's first convolution: its input (the skip) crosses too.
  const std::vector<std::string> ends = {"layer1/layer1.1/conv1/Conv", "layer2/layer2.1/conv1/Conv",
                                         "layer3/layer3.1/conv1/Conv"};
  write_plan(e, d + "/plan4.json", ends, {{0}, {1}, {2}, {3}}, "1f1b-rr");
  const std::string common = "--model " + e.onnx + " --data synthetic --seed 5 --no-eval ";

  // 1F1B-RR with weight stashing: MPI equals the reference bit for bit.
  pipedream("run --plan " + d + "/plan4.json " + common + "--batch 4 --minibatches 8 --save " + d + "/mpi.safetensors",
            d + "/mpi.log");
  EXPECT_EQ(boundary_tensors(d + "/mpi.log"), (std::vector<int>{2, 2, 2})) << read_text(d + "/mpi.log");
  pipedream("run --plan " + d + "/plan4.json --reference " + common + "--batch 4 --minibatches 8 --save " + d +
                "/ref.safetensors",
            d + "/ref.log");
  EXPECT_TRUE(same_bits(d + "/mpi.safetensors", d + "/ref.safetensors"));
  // Its weights (layers numbered by stage) export into the file.
  pipedream("export --onnx " + e.onnx + " --weights " + d + "/mpi.safetensors -o " + d + "/trained.onnx", d + "/export.log");

  // Replication and vertical sync: stage 0 on two workers.
  write_plan(e, d + "/plan211.json", {ends[0], ends[2]}, {{0, 1}, {2}, {3}}, "1f1b-rr");
  pipedream("run --plan " + d + "/plan211.json " + common + "--weights vertical --batch 4 --minibatches 8 --save " + d +
                "/vmpi.safetensors",
            d + "/vmpi.log");
  pipedream("run --plan " + d + "/plan211.json --reference " + common + "--weights vertical --batch 4 --minibatches 8 --save " +
                d + "/vref.safetensors",
            d + "/vref.log");
  EXPECT_TRUE(same_bits(d + "/vmpi.safetensors", d + "/vref.safetensors"));

  // Flush schedules: a batch of 8 in 4 microbatches of 2 equals train's batch of 8 as 4 microbatches.
  pipedream("train " + common + "--threads 1 --batch 8 --microbatches 4 --minibatches 4 --save " + d + "/train.safetensors",
            d + "/train.log");
  for (const std::string schedule : {"1f1b-flush", "gpipe", "zb-h1"}) {
    pipedream("run --plan " + d + "/plan4.json " + common + "--schedule " + schedule +
                  " --microbatches 4 --batch 8 --minibatches 4 --save " + d + "/" + schedule + ".safetensors",
              d + "/" + schedule + ".log");
    EXPECT_LE(max_difference(d + "/train.safetensors", d + "/" + schedule + ".safetensors"), 1e-6) << schedule;
  }
  // Interleaved: 8 stages, two per worker, every cut inside a block.
  write_plan(e, d + "/plan8.json",
             {"layer1/layer1.0/conv1/Conv", "layer1/layer1.1/conv1/Conv", "layer2/layer2.0/conv1/Conv",
              "layer2/layer2.1/conv1/Conv", "layer3/layer3.0/conv1/Conv", "layer3/layer3.1/conv1/Conv",
              "layer4/layer4.0/conv1/Conv"},
             {{0}, {1}, {2}, {3}, {4}, {5}, {6}, {7}}, "1f1b-rr");
  pipedream("run --plan " + d + "/plan8.json " + common +
                "--schedule interleaved-1f1b --virtual-stages 2 --microbatches 4 --batch 8 --minibatches 4 --save " + d +
                "/interleaved.safetensors",
            d + "/interleaved.log");
  EXPECT_EQ(boundary_tensors(d + "/interleaved.log"), std::vector<int>(7, 2)) << read_text(d + "/interleaved.log");
  EXPECT_LE(max_difference(d + "/train.safetensors", d + "/interleaved.safetensors"), 1e-6);

  // A checkpoint at step 4, resumed, repeats the uninterrupted run.
  pipedream("run --plan " + d + "/plan4.json " + common + "--batch 4 --minibatches 8 --checkpoint-dir " + d +
                "/ckpt --checkpoint-every 4 --save " + d + "/whole.safetensors",
            d + "/ckpt.log");
  pipedream("run --plan " + d + "/plan4.json " + common + "--batch 4 --minibatches 8 --resume " + d +
                "/ckpt/step-4 --save " + d + "/resumed.safetensors",
            d + "/resume.log");
  EXPECT_TRUE(same_bits(d + "/whole.safetensors", d + "/resumed.safetensors"));
}

TEST(OnnxDagPipeline, Densenet121CutInsideDenseBlocks) {
  PD_SKIP_WITHOUT_TORCH();
  const Exported e = export_and_profile("densenet121");
  ASSERT_FALSE(e.units.empty());
  const std::string& d = e.dir;
  // Planned on antichains from the per-unit profile: a DAG plan listing units.
  pipedream("plan --profile " + d + "/profile.json --workers 4 --bandwidth 1 --straight -o " + d + "/planned.json", d + "/plan.log");
  const nlohmann::json planned = nlohmann::json::parse(read_text(d + "/planned.json"));
  EXPECT_EQ(planned.at("state_space"), "antichain");
  for (const auto& s : planned.at("stages")) EXPECT_TRUE(s.contains("nodes")) << s.dump();

  const std::vector<std::string> ends = {"features/denseblock1/denselayer4/conv2/Conv",
                                         "features/denseblock2/denselayer8/conv2/Conv",
                                         "features/denseblock3/denselayer12/conv2/Conv"};
  write_plan(e, d + "/plan4.json", ends, {{0}, {1}, {2}, {3}}, "1f1b-rr");
  const std::string common = "--model " + e.onnx + " --data synthetic --seed 5 --no-eval ";
  pipedream("run --plan " + d + "/plan4.json " + common + "--batch 4 --minibatches 6 --save " + d + "/mpi.safetensors",
            d + "/mpi.log");
  // Inside a dense block every earlier feature map is still to be concatenated.
  for (int n : boundary_tensors(d + "/mpi.log")) EXPECT_GT(n, 2) << read_text(d + "/mpi.log");
  EXPECT_EQ(boundary_tensors(d + "/mpi.log").size(), 3u) << read_text(d + "/mpi.log");
  pipedream("run --plan " + d + "/plan4.json --reference " + common + "--batch 4 --minibatches 6 --save " + d +
                "/ref.safetensors",
            d + "/ref.log");
  EXPECT_TRUE(same_bits(d + "/mpi.safetensors", d + "/ref.safetensors"));

  pipedream("train " + common + "--threads 1 --batch 8 --microbatches 4 --minibatches 3 --save " + d + "/train.safetensors",
            d + "/train.log");
  pipedream("run --plan " + d + "/plan4.json " + common + "--schedule 1f1b-flush --microbatches 4 --batch 8 --minibatches 3 --save " +
                d + "/flush.safetensors",
            d + "/flush.log");
  EXPECT_LE(max_difference(d + "/train.safetensors", d + "/flush.safetensors"), 1e-6);
}

}  // namespace
}  // namespace pd::onnx
