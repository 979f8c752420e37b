// pipedream-bench runtime: how close the pipelined runtime gets to what the
// hardware allows. Runs itself under mpirun with 2 workers (1 thread each):
//  - pipeline_vs_ceiling (per model): the planner's straight 2-stage plan
//    from a profile measured here (1 thread); the ceiling is the two stages'
//    compute loops (forward, backward, optimizer step) running at the same
//    time with no communication, measured in the same run; the pipeline is
//    `run`'s executor over MPI. efficiency = pipeline / ceiling.
//  - action_overhead: the same with layers that do nothing, in us per action.
//  - simulate_vs_measured: measured time per minibatch against
//    `pipedream simulate`'s prediction for the same plan from the profiled
//    per-layer costs (error = (measured - predicted) / predicted).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>

#include <nlohmann/json.hpp>

#include "bench/suites.h"
#include "core/cpu/gemm.h"
#include "core/error.h"
#include "core/loss.h"
#include "models/layer_range.h"
#include "runtime/comm/mpi_transport.h"
#include "runtime/executor.h"
#include "runtime/gather.h"
#include "runtime/launcher.h"
#include "runtime/simulator/simulator.h"
#include "planner/planner.h"
#include "profiler/measure.h"

namespace pd::bench {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct BenchArgs {
  std::string models = "mlp,cnn";
  int64_t minibatches = 120, batch = 64, overhead_minibatches = 3000;
};

Plan two_stage_plan(const Model& m, int split) {
  Plan p;
  p.stages.resize(2);
  p.stages[0] = PlanStage{.index = 0, .first_layer = 0, .last_layer = split, .replicas = 1, .ranks = {0}};
  p.stages[1] = PlanStage{.index = 1, .first_layer = split + 1, .last_layer = m.size() - 1, .replicas = 1, .ranks = {1}};
  p.config = "1-1";
  return p;
}

// The stage's compute alone: forward, backward (with the loss on the last
// stage), optimizer step, on fixed inputs - what a perfect pipeline would do.
double compute_loop_seconds(const Model& m, const Dataset& data, const PlanStage& s, int64_t batch, int64_t n,
                            const Optimizer& opt) {
  ParameterStore w = ParameterStore::create(m, s.first_layer, s.last_layer, 1);
  ParameterStore g = w.zeros_like_params();
  OptimizerState st = opt.make_state(w.all_params());
  std::vector<int64_t> idx(static_cast<size_t>(batch));
  for (int64_t i = 0; i < batch; ++i) idx[static_cast<size_t>(i)] = i;
  Batch b = fetch(data, idx);
  Tensor x = b.inputs;
  if (s.first_layer > 0) {  // the activation the previous stage would send
    ParameterStore w0 = ParameterStore::create(m, 0, s.first_layer - 1, 1);
    RangeContext c;
    x = forward_layers(m, w0, 0, s.first_layer - 1, b.inputs, {.training = false}, c);
  }
  const bool last = s.last_layer == m.size() - 1;
  Tensor dy;
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    RangeContext ctx;
    Tensor y = forward_layers(m, w, s.first_layer, s.last_layer, x, {.training = true, .minibatch_id = uint64_t(i)}, ctx);
    if (last) dy = softmax_cross_entropy(y, b.labels, true).grad;
    else if (!dy.defined()) dy = Tensor::full(y.shape(), 1e-3f);
    backward_layers(m, w, g, s.first_layer, s.last_layer, dy, {.training = true}, ctx, s.first_layer > 0);
    opt.step(w.all_params(), g.all_params(), st, 0.01f);
    g.zero_params();
  }
  return since(t0);
}

// `run`'s executor on a plan, synthetic data; wall seconds of this rank.
double pipeline_seconds(const Model& m, const Dataset& data, const Plan& plan, int64_t batch, int64_t n,
                        const Optimizer& opt, Transport& t, int64_t* actions) {
  ScheduleOptions o;
  o.minibatches = n;
  const Schedule sched(plan, o);
  StageState state = make_stage_state(m, plan.stage_of_rank(t.rank()), plan.stages[plan.stage_of_rank(t.rank())].first_layer,
                                      plan.stages[plan.stage_of_rank(t.rank())].last_layer, 1, opt);
  StageTraining tr;
  tr.model = &m;
  tr.train = &data;
  tr.batch = batch;
  tr.optimizer = &opt;
  tr.lr.base_lr = 0.01f;
  StageExecutor ex(sched, t.rank(), state, tr, t);
  t.barrier();
  const auto t0 = Clock::now();
  ex.run();
  const double s = since(t0);
  if (actions) *actions = ex.stats().actions;
  return s;
}

double max_over_ranks(Transport& t, double v) {
  Tensor x = Tensor::from_floats({static_cast<float>(v)}, {1});
  if (t.rank() != 0) {
    send_text(t, 0, std::to_string(v));
    return std::stod(recv_text(t, 0));
  }
  double mx = v;
  for (int r = 1; r < t.world_size(); ++r) mx = std::max(mx, std::stod(recv_text(t, r)));
  for (int r = 1; r < t.world_size(); ++r) send_text(t, r, std::to_string(mx));
  return mx;
}

void emit(Transport& t, const nlohmann::json& j) {
  if (t.rank() == 0) {
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
}

void bench_model(const std::string& name, const BenchArgs& a, Transport& t, const Optimizer& opt) {
  const Model m = resolve_model(name);
  DataSplits data = open_dataset("synthetic", "", m);
  // Rank 0 profiles (1 thread) and plans a straight 2-stage pipeline - the
  // planner balances the stages; both ranks use that plan.
  Plan plan;
  if (t.rank() == 0) {
    ProfileOptions po;
    po.batch = a.batch;
    po.threads = 1;
    po.warmup = 2;
    po.iters = 7;
    const Profile profile = measure_profile(m, po);
    PlannerOptions o;
    o.straight = true;
    plan = plan_pipeline(profile, flat_topology(2, 4.0), o);
    send_text(t, 1, plan_to_json(plan).dump());
  } else {
    plan = plan_from_json(nlohmann::json::parse(recv_text(t, 0)), "rank 0's plan");
  }
  cpu::set_compute_threads(1);
  const PlanStage& mine = plan.stages[static_cast<size_t>(plan.stage_of_rank(t.rank()))];
  compute_loop_seconds(m, *data.train, mine, a.batch, 3, opt);  // warm-up
  t.barrier();
  const double ceiling_s = max_over_ranks(t, compute_loop_seconds(m, *data.train, mine, a.batch, a.minibatches, opt));
  pipeline_seconds(m, *data.train, plan, a.batch, 8, opt, t, nullptr);  // warm-up
  const double pipe_s = max_over_ranks(t, pipeline_seconds(m, *data.train, plan, a.batch, a.minibatches, opt, t, nullptr));
  const double samples = static_cast<double>(a.minibatches * a.batch);
  const auto& s0 = plan.stages[0];
  const auto& s1 = plan.stages[1];
  emit(t, {{"suite", "runtime"}, {"bench", "pipeline_vs_ceiling"}, {"model", name}, {"workers", 2},
           {"threads_per_worker", 1}, {"batch", a.batch}, {"minibatches", a.minibatches},
           {"split", cat("layers ", s0.first_layer, "..", s0.last_layer, " | ", s1.first_layer, "..", s1.last_layer)},
           {"pipeline_samples_per_s", samples / pipe_s}, {"ceiling_samples_per_s", samples / ceiling_s},
           {"efficiency", ceiling_s / pipe_s}});
  // `pipedream simulate`'s prediction for this plan and schedule, from the
  // costs the profiler measured (each stage alone, 1 thread).
  SimulationOptions so;
  so.schedule.minibatches = a.minibatches;
  const SimulationReport rep = simulate(plan, so);
  const double measured = pipe_s / static_cast<double>(a.minibatches);
  emit(t, {{"suite", "runtime"}, {"bench", "simulate_vs_measured"}, {"model", name},
           {"predicted_time_per_minibatch_s", rep.time_per_minibatch_s},
           {"planner_time_per_minibatch_s", plan.time_per_minibatch_s},
           {"measured_time_per_minibatch_s", measured},
           {"error", (measured - rep.time_per_minibatch_s) / rep.time_per_minibatch_s}});
}

void bench_overhead(const BenchArgs& a, Transport& t, const Optimizer& opt) {
  nlohmann::json spec = {{"name", "empty"}, {"input", {{"shape", {4}}}}, {"classes", 4}, {"layers", nlohmann::json::array()}};
  for (int i = 0; i < 4; ++i) spec["layers"].push_back({{"type", "relu"}, {"name", cat("relu", i)}});
  const Model m = build_model(spec);
  DataSplits data = open_dataset("synthetic", "", m);
  const Plan plan = two_stage_plan(m, 1);
  int64_t actions = 0;
  pipeline_seconds(m, *data.train, plan, 1, 100, opt, t, &actions);
  const double s = max_over_ranks(t, pipeline_seconds(m, *data.train, plan, 1, a.overhead_minibatches, opt, t, &actions));
  emit(t, {{"suite", "runtime"}, {"bench", "action_overhead"}, {"transport", "mpi"}, {"workers", 2},
           {"minibatches", a.overhead_minibatches}, {"actions_per_worker", actions},
           {"us_per_action", 1e6 * s / static_cast<double>(actions)},
           {"us_per_minibatch", 1e6 * s / static_cast<double>(a.overhead_minibatches)}});
}

void run_bench(const BenchArgs& a) {
  if (!launched_under_mpi()) {
    std::exit(run_and_wait(mpirun_command(2, own_arguments())));
  }
  require_world_size(2, launcher_world_size());
  cpu::set_compute_threads(1);
  MpiTransport t(120);
  OptimizerConfig oc;
  oc.lr = 0.01f;
  oc.momentum = 0.9f;
  auto opt = make_optimizer(oc);
  std::string list = a.models;
  for (size_t start = 0; start <= list.size();) {
    size_t end = list.find(',', start);
    if (end == std::string::npos) end = list.size();
    if (end > start) bench_model(list.substr(start, end - start), a, t, *opt);
    start = end + 1;
  }
  bench_overhead(a, t, *opt);
}

}  // namespace

void add_runtime_suite(CLI::App& app) {
  auto* cmd = app.add_subcommand("runtime", "Pipelined runtime vs its compute ceiling, per-action overhead, prediction error");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("--models", a->models, "Comma-separated zoo models")->capture_default_str();
  cmd->add_option("--minibatches", a->minibatches, "Minibatches per measurement")->capture_default_str();
  cmd->add_option("--batch", a->batch, "Minibatch size")->capture_default_str();
  cmd->add_option("--overhead-minibatches", a->overhead_minibatches, "Minibatches of the empty-layer run")
      ->capture_default_str();
  cmd->callback([a] { run_bench(*a); });
}

}  // namespace pd::bench
