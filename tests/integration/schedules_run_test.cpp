// zb-h1 and interleaved-1f1b under mpirun: bit for bit the
// single-process reference and 1f1b-flush, and synchronous SGD on the whole
// batch as `pipedream train` computes it, on cnn and gpt-mini.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "run_job.h"

namespace pd::testing {
namespace {

struct ModelCase {
  std::string name, options, plan4, plan8;  // 4 stages (zb-h1, 1f1b-flush) and 8 (interleaved, v = 2)
  std::string plan211;                      // 2bw's replicated plan
};

std::string plan_json(const std::vector<std::pair<int, int>>& layers) {
  std::string config, stages;
  for (size_t s = 0; s < layers.size(); ++s) {
    config += s ? "-1" : "1";
    stages += (s ? ",\n  " : "\n  ") + std::string("{\"index\": ") + std::to_string(s) + ", \"layers\": [" +
              std::to_string(layers[s].first) + ", " + std::to_string(layers[s].second) +
              "], \"replicas\": 1, \"ranks\": [" + std::to_string(s) + "]}";
  }
  return "{\"format\": \"pipedream-plan/1\", \"config\": \"" + config + "\", \"stages\": [" + stages + "]}";
}

std::string plan_211(std::pair<int, int> a, std::pair<int, int> b, std::pair<int, int> c) {
  auto layers = [](std::pair<int, int> l) {
    return "[" + std::to_string(l.first) + ", " + std::to_string(l.second) + "]";
  };
  return "{\"format\": \"pipedream-plan/1\", \"config\": \"2-1-1\", \"stages\": [\n"
         "  {\"index\": 0, \"layers\": " + layers(a) + ", \"replicas\": 2, \"ranks\": [0, 1]},\n"
         "  {\"index\": 1, \"layers\": " + layers(b) + ", \"replicas\": 1, \"ranks\": [2]},\n"
         "  {\"index\": 2, \"layers\": " + layers(c) + ", \"replicas\": 1, \"ranks\": [3]}]}";
}

std::vector<ModelCase> models() {
  return {{"cnn", "", plan_json({{0, 2}, {3, 5}, {6, 7}, {8, 9}}),
           plan_json({{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 7}, {8, 9}}),
           plan_211({0, 5}, {6, 7}, {8, 9})},
          {"gpt-mini", "vocab=64,context=16,width=32,depth=6,heads=2",
           plan_json({{0, 1}, {2, 3}, {4, 5}, {6, 8}}),
           plan_json({{0, 0}, {1, 1}, {2, 2}, {3, 3}, {4, 4}, {5, 5}, {6, 6}, {7, 8}}),
           plan_211({0, 3}, {4, 6}, {7, 8})}};
}

std::string model_args(const ModelCase& m) {
  return " --model " + m.name + (m.options.empty() ? "" : " --model-options " + m.options) +
         " --data synthetic --seed 3";
}

// 3 steps, batches of 16 in 4 microbatches of 4 samples.
RunFiles run(const std::string& dir, const std::string& tag, const ModelCase& m, const std::string& plan,
             const std::string& schedule, bool reference) {
  RunFiles f{dir + "/" + tag + ".safetensors", dir + "/" + tag + ".jsonl"};
  const std::string args = " run --plan " + plan + model_args(m) +
                           " --no-eval --threads-per-worker 1 --log-every 1 --timeout 60 --minibatches 3"
                           " --microbatches 4 --batch 16 --schedule " + schedule + " --save " + f.save +
                           " --metrics " + f.metrics;
  JobResult r = reference ? run_shell(pipedream_binary() + args + " --reference")
                          : run_shell(mpirun(4) + pipedream_binary() + args);
  EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
  return f;
}

// The largest |a - b| over every weight.
double max_difference(const std::string& a_path, const std::string& b_path) {
  auto a = load_by_name(a_path), b = load_by_name(b_path);
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (auto& [n, t] : b) {
    EXPECT_TRUE(a.count(n)) << n;
    if (!a.count(n)) continue;
    std::vector<float> x = a[n].to_floats(), y = t.to_floats();
    EXPECT_EQ(x.size(), y.size()) << n;
    for (size_t k = 0; k < std::min(x.size(), y.size()); ++k)
      worst = std::max(worst, static_cast<double>(std::fabs(x[k] - y[k])));
  }
  return worst;
}

TEST(NewSchedulesRun, MatchTheReferenceOneFOneBFlushAndTrainOnTheWholeBatch) {
  for (const ModelCase& m : models()) {
    const std::string dir = scratch_dir("new_schedules_" + m.name);
    write_text(dir + "/4.json", m.plan4);
    write_text(dir + "/8.json", m.plan8);
    const RunFiles flush = run(dir, "flush_ref", m, dir + "/4.json", "1f1b-flush", true);
    const RunFiles zb_mpi = run(dir, "zb_mpi", m, dir + "/4.json", "zb-h1", false);
    const RunFiles zb_ref = run(dir, "zb_ref", m, dir + "/4.json", "zb-h1", true);
    const RunFiles il_mpi = run(dir, "il_mpi", m, dir + "/8.json", "interleaved-1f1b --virtual-stages 2", false);
    const RunFiles il_ref = run(dir, "il_ref", m, dir + "/8.json", "interleaved-1f1b --virtual-stages 2", true);
    expect_same_bits(zb_mpi, zb_ref, m.name + " zb-h1: mpirun vs --reference");
    expect_same_bits(il_mpi, il_ref, m.name + " interleaved-1f1b: mpirun vs --reference");
    // Microbatch gradients summed in microbatch order, whatever the order
    // of the F, B and W passes: the same bits as 1f1b-flush.
    expect_same_bits(zb_mpi, flush, m.name + " zb-h1 vs 1f1b-flush");
    expect_same_bits(il_mpi, flush, m.name + " interleaved-1f1b vs 1f1b-flush");

    // One worker on the whole batch of 16: the loss gradient is summed over
    // 16 samples at once instead of 4 microbatch sums of 4, so the last bits
    // may differ (float addition is not associative).
    const std::string train_save = dir + "/train.safetensors";
    JobResult t = run_shell(pipedream_binary() + " train" + model_args(m) +
                            " --batch 16 --no-eval --threads 1 --minibatches 3 --save " + train_save);
    ASSERT_EQ(t.exit_code, 0) << t.output;
    const double zb_diff = max_difference(zb_mpi.save, train_save);
    const double il_diff = max_difference(il_mpi.save, train_save);
    EXPECT_LE(zb_diff, 1e-6) << m.name << " zb-h1 vs train";
    EXPECT_LE(il_diff, 1e-6) << m.name << " interleaved-1f1b vs train";
    std::printf("%s: largest weight difference to train, zb-h1 %.3g, interleaved-1f1b %.3g\n", m.name.c_str(),
                zb_diff, il_diff);
  }
}

// A rank of interleaved-1f1b runs several stages, and the test set flows
// through them in stage order (rank 0's chunk 1 after the last rank's chunk
// 0): the evaluations equal 1f1b-flush's on the 4-stage plan, bit for bit,
// as the weights do.
TEST(NewSchedulesRun, InterleavedRunsEvaluateThroughThePipelineAsOneFOneBFlushDoes) {
  const ModelCase m = models().front();  // cnn
  const std::string dir = scratch_dir("interleaved_eval");
  write_text(dir + "/4.json", m.plan4);
  write_text(dir + "/8.json", m.plan8);
  auto run_eval = [&](const std::string& tag, const std::string& plan, const std::string& schedule) {
    RunFiles f{dir + "/" + tag + ".safetensors", dir + "/" + tag + ".jsonl"};
    JobResult r = run_shell(mpirun(4) + pipedream_binary() + " run --plan " + plan + model_args(m) +
                            " --threads-per-worker 1 --log-every 1 --timeout 60 --minibatches 4 --microbatches 4"
                            " --batch 16 --eval-every 2 --eval-batch 100 --schedule " + schedule + " --save " + f.save +
                            " --metrics " + f.metrics);
    EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
    return f;
  };
  const RunFiles flush = run_eval("flush", dir + "/4.json", "1f1b-flush");
  const RunFiles il = run_eval("il", dir + "/8.json", "interleaved-1f1b --virtual-stages 2");
  expect_same_bits(il, flush, "interleaved-1f1b vs 1f1b-flush", 4);
  const std::vector<nlohmann::json> a = metric_lines(il.metrics, "eval"), b = metric_lines(flush.metrics, "eval");
  ASSERT_EQ(a.size(), 2u);  // after steps 2 and 4
  ASSERT_EQ(b.size(), 2u);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].at("step"), b[i].at("step"));
    EXPECT_EQ(a[i].at("test_loss"), b[i].at("test_loss")) << "evaluation " << i;
    EXPECT_EQ(a[i].at("test_accuracy"), b[i].at("test_accuracy")) << "evaluation " << i;
  }
}

// interleaved-1f1b checkpoints between batches, where its pipeline is
// drained, every chunk writing its stage: writing them changes nothing, and
// a run resumed from the middle one ends at the uninterrupted run's bits.
TEST(NewSchedulesRun, InterleavedRunsCheckpointAndResumeToTheSameBits) {
  const ModelCase m = models().back();  // gpt-mini
  const std::string dir = scratch_dir("interleaved_checkpoint");
  write_text(dir + "/8.json", m.plan8);
  auto run_il = [&](const std::string& tag, const std::string& extra) {
    RunFiles f{dir + "/" + tag + ".safetensors", dir + "/" + tag + ".jsonl"};
    JobResult r = run_shell(mpirun(4) + pipedream_binary() + " run --plan " + dir + "/8.json" + model_args(m) +
                            " --no-eval --threads-per-worker 1 --log-every 1 --timeout 60 --minibatches 6"
                            " --microbatches 4 --batch 16 --schedule interleaved-1f1b --virtual-stages 2 --save " +
                            f.save + " --metrics " + f.metrics + extra);
    EXPECT_EQ(r.exit_code, 0) << tag << ":\n" << r.output;
    return f;
  };
  const RunFiles whole = run_il("whole", "");
  const RunFiles saved = run_il("saved", " --checkpoint-dir " + dir + "/ck --checkpoint-every 2");
  expect_same_bits(saved, whole, "with checkpoints vs without", 6);
  for (const char* step : {"step-2", "step-4", "step-6"})
    EXPECT_TRUE(std::filesystem::exists(dir + "/ck/" + step + "/state.json")) << step;
  const RunFiles resumed = run_il("resumed", " --resume " + dir + "/ck/step-4");
  expect_same_weights(resumed, whole, "resumed at step 4 vs uninterrupted");
  auto losses = step_losses(resumed.metrics), all = step_losses(whole.metrics);
  ASSERT_EQ(losses.size(), 2u);
  for (const auto& [step, loss] : losses) EXPECT_EQ(loss, all.at(step)) << "step " << step;
}

TEST(NewSchedulesRun, TwoBWEqualsTrainWithAGradientDelayOfOneBatch) {
  for (const ModelCase& m : models()) {
    const std::string dir = scratch_dir("two_bw_" + m.name);
    write_text(dir + "/4.json", m.plan4);
    write_text(dir + "/211.json", m.plan211);
    // w_{b+1} = w_b - lr g(w_{b-1}; batch b), batches of 4 x 4 samples.
    const std::string delayed = dir + "/train_d1.safetensors", plain = dir + "/train_d0.safetensors";
    for (const auto& [path, delay] : {std::pair{delayed, 1}, std::pair{plain, 0}}) {
      JobResult t = run_shell(pipedream_binary() + " train" + model_args(m) +
                              " --batch 16 --no-eval --threads 1 --minibatches 3 --gradient-delay " +
                              std::to_string(delay) + " --save " + path);
      ASSERT_EQ(t.exit_code, 0) << t.output;
    }
    for (const std::string plan : {"4", "211"}) {
      const std::string what = m.name + " 2bw on " + plan;
      const RunFiles mpi = run(dir, "mpi_" + plan, m, dir + "/" + plan + ".json", "2bw", false);
      const RunFiles ref = run(dir, "ref_" + plan, m, dir + "/" + plan + ".json", "2bw", true);
      expect_same_bits(mpi, ref, what + ": mpirun vs --reference");
      // Sum order: 4 microbatch sums (2-1-1: of two replicas, all-reduced)
      // instead of one over 16 samples.
      const double diff = max_difference(mpi.save, delayed);
      EXPECT_LE(diff, 1e-6) << what << " vs train --gradient-delay 1";
      // ... and the delay is real: not synchronous SGD.
      EXPECT_GT(max_difference(mpi.save, plain), 1e-4) << what << " vs train without delay";
      std::printf("%s: largest weight difference to train --gradient-delay 1: %.3g\n", what.c_str(), diff);
    }
  }
}

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

void write_lines(const std::string& path, const std::vector<std::string>& lines) {
  std::ofstream out(path);
  for (const auto& l : lines) out << l << "\n";
}

size_t find_line(const std::vector<std::string>& lines, const std::string& prefix) {
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].rfind(prefix, 0) == 0) return i;
  ADD_FAILURE() << "no line starts with " << prefix;
  return 0;
}

TEST(NewSchedulesRun, AnEditedScheduleFileRunsLikeTheBuiltInOneAndADeadlockingOneIsRefused) {
  const ModelCase m = models().front();  // cnn, 4 stages
  const std::string dir = scratch_dir("schedule_file_run");
  write_text(dir + "/4.json", m.plan4);
  const std::string csv = dir + "/zb.csv";
  JobResult e = run_shell(pipedream_binary() + " schedule --plan " + dir + "/4.json" +
                          " --schedule zb-h1 --microbatches 4 --minibatches 3 --format csv -o " + csv);
  ASSERT_EQ(e.exit_code, 0) << e.output;
  std::vector<std::string> lines = lines_of(csv);
  // The last stage sends microbatch 0's gradient, then receives microbatch
  // 1's activation: independent, so either order gives the same run.
  const size_t send = find_line(lines, "3,3,SEND_B,0,0,");
  ASSERT_EQ(lines[send + 1].rfind("3,3,RECV_F,0,1,", 0), 0u) << lines[send + 1];
  std::swap(lines[send], lines[send + 1]);
  write_lines(dir + "/edited.csv", lines);

  auto run_file = [&](const std::string& file, const std::string& tag, bool reference) {
    RunFiles f{dir + "/" + tag + ".safetensors", dir + "/" + tag + ".jsonl"};
    JobResult r = run_shell((reference ? "" : mpirun(4)) + pipedream_binary() + " run --plan " + dir + "/4.json" +
                            model_args(m) + " --no-eval --threads-per-worker 1 --log-every 1 --timeout 60 --batch 16"
                            " --schedule-file " + file + " --save " + f.save + " --metrics " + f.metrics +
                            (reference ? " --reference" : ""));
    return std::pair{r, f};
  };
  const RunFiles builtin = run(dir, "builtin", m, dir + "/4.json", "zb-h1", false);
  auto [edited_run, edited] = run_file(dir + "/edited.csv", "edited", false);
  ASSERT_EQ(edited_run.exit_code, 0) << edited_run.output;
  expect_same_bits(edited, builtin, "edited zb-h1 schedule file vs the built-in schedule");

  // Rank 0 waits for microbatch 0's gradient before sending its activation.
  lines = lines_of(csv);
  const size_t recv = find_line(lines, "0,0,RECV_B,0,0,");
  const std::string moved = lines[recv];
  lines.erase(lines.begin() + static_cast<long>(recv));
  lines.insert(lines.begin() + static_cast<long>(find_line(lines, "0,0,F,0,0,")), moved);
  write_lines(dir + "/dead.csv", lines);
  for (bool reference : {false, true}) {
    auto [dead_run, unused] = run_file(dir + "/dead.csv", "dead", reference);
    EXPECT_EQ(dead_run.exit_code, 2) << dead_run.output;
    EXPECT_NE(dead_run.output.find("deadlock: rank 0 blocks forever at action 0 recv-grad(b=0 mb=0) <- rank 1"),
              std::string::npos)
        << dead_run.output;
  }
}

}  // namespace
}  // namespace pd::testing
