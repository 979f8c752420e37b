// pipedream-bench runtime: how close the pipelined runtime gets to what the
// hardware allows. Runs itself under mpirun with 2 workers (1 thread each):
//  - pipeline_vs_ceiling (per model): the planner's straight 2-stage plan
//    from a profile measured here (1 thread); the ceiling is the two stages'
//    compute loops (forward, backward, optimizer step) running at the same
//    time with no communication; the pipeline is `run`'s executor over MPI.
//    Each of --rounds rounds measures ceiling, pipeline, pipeline, ceiling
//    (the machine may be shared: a drift of its speed then hits both);
//    efficiency = ceiling time / pipeline time, the median of the rounds'. Per rank it also reports
//    where the last round's time went (F, B, step, wait) and the CPU time
//    used (main thread, whole process: the difference is the communication
//    thread) against the ceiling loop's.
//  - action_overhead: the same with layers that do nothing, in us per action.
//  - simulate_vs_measured: measured time per minibatch against
//    `pipedream simulate`'s prediction for the same plan from the profiled
//    per-layer costs (error = (measured - predicted) / predicted), and
//    against the simulation with each stage's cost replaced by its compute
//    loop measured concurrently here (what the profile cannot know: the
//    optimizer step, two processes sharing the machine).
// Data: the synthetic dataset's samples, materialized in memory once (a
// real run gathers samples from memory; generating them is not the
// runtime's cost).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>

#include <nlohmann/json.hpp>

#include "bench/suites.h"
#include "core/compute_settings.h"
#include "core/error.h"
#include "core/loss.h"
#include "models/layer_range.h"
#include "runtime/comm/mpi_transport.h"
#include "runtime/executor.h"
#include "runtime/gather.h"
#include "runtime/clocks.h"
#include "runtime/launcher.h"
#include "runtime/simulator/simulator.h"
#include "runtime/trace.h"
#include "planner/planner.h"
#include "profiler/measure.h"

namespace pd::bench {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct BenchArgs {
  std::string models = "mlp,cnn";
  int64_t minibatches = 100, batch = 64, overhead_minibatches = 3000;
  int rounds = 5;
  std::string weights = "stash";
  std::string trace;  // prefix: PREFIX.<model>.json per model
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
struct LoopPhases {
  double f = 0, b = 0, step = 0, cpu = 0;
};
double compute_loop_seconds(const Model& m, const Dataset& data, const PlanStage& s, int64_t batch, int64_t n,
                            const Optimizer& opt, LoopPhases* phases = nullptr) {
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
  LoopPhases ph;
  const double c0 = thread_cpu_seconds();
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < n; ++i) {
    const auto f0 = Clock::now();
    RangeContext ctx;
    Tensor y = forward_layers(m, w, s.first_layer, s.last_layer, x, {.training = true, .minibatch_id = uint64_t(i)}, ctx);
    if (last) dy = softmax_cross_entropy(y, b.labels, true).grad;
    else if (!dy.defined()) dy = Tensor::full(y.shape(), 1e-3f);
    const auto b0 = Clock::now();
    backward_layers(m, w, g, s.first_layer, s.last_layer, dy, {.training = true}, ctx, s.first_layer > 0);
    const auto s0 = Clock::now();
    opt.step(w.all_params(), g.all_params(), st, 0.01f);
    g.zero_params();
    ph.f += std::chrono::duration<double>(b0 - f0).count();
    ph.b += std::chrono::duration<double>(s0 - b0).count();
    ph.step += since(s0);
  }
  const double wall = since(t0);
  ph.cpu = thread_cpu_seconds() - c0;
  if (phases) *phases = ph;
  return wall;
}

// `run`'s executor on a plan, synthetic data; wall seconds of this rank.
struct PipelineRun {
  double seconds = 0, thread_cpu_s = 0, process_cpu_s = 0;
  int64_t actions = 0;
  std::map<std::string, double> phase_s;  // per action name ("F", "B", "step", "wait")
  std::vector<ActionSpan> events;
};

PipelineRun pipeline_run(const Model& m, const Dataset& data, const Plan& plan, int64_t batch, int64_t n,
                         const Optimizer& opt, Transport& t, WeightPolicy policy = WeightPolicy::Stash) {
  ScheduleOptions o;
  o.minibatches = n;
  o.policy = policy;
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
  ex.enable_trace(std::chrono::duration<double>(t0.time_since_epoch()).count());
  const double c0 = thread_cpu_seconds(), p0 = process_cpu_seconds();
  ex.run();
  PipelineRun r;
  r.seconds = since(t0);
  r.thread_cpu_s = thread_cpu_seconds() - c0;
  r.process_cpu_s = process_cpu_seconds() - p0;
  r.actions = ex.stats().actions;
  r.events = ex.trace();
  for (const ActionSpan& e : r.events) r.phase_s[e.name] += e.end_s - e.start_s;
  return r;
}

// Rank 0 gets every rank's per-phase seconds (for the JSON line: where the time went).
nlohmann::json phases_of_ranks(Transport& t, const PipelineRun& r) {
  nlohmann::json mine = {{"wall_s", r.seconds}, {"main_thread_cpu_s", r.thread_cpu_s}, {"process_cpu_s", r.process_cpu_s}};
  for (const auto& [k, v] : r.phase_s) mine[k + "_s"] = v;
  if (t.rank() != 0) {
    send_text(t, 0, mine.dump());
    return {};
  }
  nlohmann::json all = nlohmann::json::array({mine});
  for (int q = 1; q < t.world_size(); ++q) all.push_back(nlohmann::json::parse(recv_text(t, q)));
  return all;
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

// Chrome trace of one pipeline run, all ranks (each rank's zero is after a barrier).
void write_trace(Transport& t, const std::string& path, const std::vector<ActionSpan>& events, const Plan& plan) {
  if (t.rank() != 0) {
    send_text(t, 0, trace_events_json(events).dump());
    return;
  }
  std::vector<nlohmann::json> all{trace_events_json(events)};
  std::vector<int> stage_of{plan.stage_of_rank(0)};
  for (int q = 1; q < t.world_size(); ++q) {
    all.push_back(nlohmann::json::parse(recv_text(t, q)));
    stage_of.push_back(plan.stage_of_rank(q));
  }
  write_chrome_trace(path, all, stage_of);
}

void emit(Transport& t, const nlohmann::json& j) {
  if (t.rank() == 0) {
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Both ranks' values, rank order (the same on every rank).
std::vector<double> of_ranks(Transport& t, double v) {
  std::vector<double> all(static_cast<size_t>(t.world_size()));
  all[static_cast<size_t>(t.rank())] = v;
  if (t.rank() != 0) {
    send_text(t, 0, std::to_string(v));
    const nlohmann::json j = nlohmann::json::parse(recv_text(t, 0));
    return j.get<std::vector<double>>();
  }
  for (int r = 1; r < t.world_size(); ++r) all[static_cast<size_t>(r)] = std::stod(recv_text(t, r));
  for (int r = 1; r < t.world_size(); ++r) send_text(t, r, nlohmann::json(all).dump());
  return all;
}

// A real run gathers samples already in memory; the synthetic dataset
// would generate each one (~1 ms per minibatch of 64 images).
std::unique_ptr<Dataset> synthetic_in_memory(const Model& m, int64_t batch) {
  DataSplits synthetic = open_dataset("synthetic", "", m);
  return load_into_memory(*synthetic.train, std::min<int64_t>(synthetic.train->size(), 16 * batch));
}

// Rank 0 profiles (1 thread) and plans a straight 2-stage pipeline - the
// planner balances the stages; both ranks use that plan.
Plan straight_two_stage_plan(const Model& m, int64_t batch, Transport& t) {
  if (t.rank() != 0) return plan_from_json(nlohmann::json::parse(recv_text(t, 0)), "rank 0's plan");
  ProfileOptions po;
  po.batch = batch;
  po.threads = 1;
  po.warmup = 2;
  po.iters = 7;
  const Profile profile = measure_profile(m, po);
  PlannerOptions o;
  o.straight = true;
  Plan plan = plan_pipeline(profile, flat_topology(2, 4.0), o);
  send_text(t, 1, plan_to_json(plan).dump());
  return plan;
}

// Everything the rounds measured; per-rank lists are in rank order.
struct RoundsMeasured {
  std::vector<double> ceilings, pipes, effs;        // per round (s, s, ratio)
  std::vector<std::vector<double>> stage_loops;     // per ceiling run: each rank's compute-loop seconds
  std::vector<std::vector<double>> cpu_loop, cpu_main, cpu_process;  // per run, per rank (s)
  PipelineRun last_run;
  LoopPhases last_loop;
};

// A round measures ceiling, pipeline, pipeline, ceiling (ABBA): the
// machine is shared and its speed drifts by 10-20% over seconds; in this
// order a linear drift hits both sides alike. A round's efficiency is its
// ceiling time over its pipeline time.
RoundsMeasured measure_rounds(const Model& m, const Dataset& data, const Plan& plan, const BenchArgs& a,
                              Transport& t, const Optimizer& opt, WeightPolicy policy) {
  const PlanStage& mine = plan.stages[static_cast<size_t>(plan.stage_of_rank(t.rank()))];
  RoundsMeasured out;
  auto measure_ceiling = [&] {
    t.barrier();
    out.stage_loops.push_back(
        of_ranks(t, compute_loop_seconds(m, data, mine, a.batch, a.minibatches, opt, &out.last_loop)));
    out.cpu_loop.push_back(of_ranks(t, out.last_loop.cpu));
    return *std::max_element(out.stage_loops.back().begin(), out.stage_loops.back().end());
  };
  auto measure_pipeline = [&] {
    out.last_run = pipeline_run(m, data, plan, a.batch, a.minibatches, opt, t, policy);
    out.cpu_main.push_back(of_ranks(t, out.last_run.thread_cpu_s));
    out.cpu_process.push_back(of_ranks(t, out.last_run.process_cpu_s));
    return max_over_ranks(t, out.last_run.seconds);
  };
  for (int r = 0; r < a.rounds; ++r) {
    const double c1 = measure_ceiling(), p1 = measure_pipeline(), p2 = measure_pipeline(), c2 = measure_ceiling();
    out.ceilings.push_back((c1 + c2) / 2);
    out.pipes.push_back((p1 + p2) / 2);
    out.effs.push_back(out.ceilings.back() / out.pipes.back());
  }
  return out;
}

// CPU time per minibatch, per rank (median of the runs): what the
// runtime costs beyond the compute, whatever share of the CPU it got.
nlohmann::json cpu_ms_per_minibatch(const RoundsMeasured& m, int64_t minibatches) {
  const double per_mb = 1e3 / static_cast<double>(minibatches);
  auto median_ms = [&](const std::vector<std::vector<double>>& rounds) {
    std::vector<double> out;
    for (size_t q = 0; q < rounds.front().size(); ++q) {
      std::vector<double> v;
      for (const auto& r : rounds) v.push_back(r[q] * per_mb);
      out.push_back(median(v));
    }
    return out;
  };
  return {{"ceiling_loop", median_ms(m.cpu_loop)},
          {"pipeline_main_thread", median_ms(m.cpu_main)},
          {"pipeline_process", median_ms(m.cpu_process)}};
}

void emit_pipeline_vs_ceiling(const std::string& name, const BenchArgs& a, const Plan& plan,
                              const RoundsMeasured& m, Transport& t) {
  const nlohmann::json cpu_ms = cpu_ms_per_minibatch(m, a.minibatches);
  const double ceiling_s = median(m.ceilings), pipe_s = median(m.pipes);
  const nlohmann::json phases = phases_of_ranks(t, m.last_run);
  const std::vector<double> loop_cpu = of_ranks(t, m.last_loop.cpu), loop_f = of_ranks(t, m.last_loop.f),
                            loop_b = of_ranks(t, m.last_loop.b), loop_step = of_ranks(t, m.last_loop.step);
  if (!a.trace.empty()) write_trace(t, cat(a.trace, ".", name, ".json"), m.last_run.events, plan);
  const double samples = static_cast<double>(a.minibatches * a.batch);
  const auto& s0 = plan.stages[0];
  const auto& s1 = plan.stages[1];
  emit(t, {{"suite", "runtime"}, {"bench", "pipeline_vs_ceiling"}, {"model", name}, {"workers", 2},
           {"threads_per_worker", 1}, {"weights", a.weights}, {"batch", a.batch}, {"minibatches", a.minibatches}, {"rounds", a.rounds},
           {"split", cat("layers ", s0.first_layer, "..", s0.last_layer, " | ", s1.first_layer, "..", s1.last_layer)},
           {"pipeline_samples_per_s", samples / pipe_s}, {"ceiling_samples_per_s", samples / ceiling_s},
           {"efficiency", median(m.effs)}, {"efficiency_per_round", m.effs}, {"cpu_ms_per_minibatch", cpu_ms}, {"last_round_ranks", phases},
           {"last_round_ceiling_ranks", {{{"F_s", loop_f[0]}, {"B_s", loop_b[0]}, {"step_s", loop_step[0]}, {"thread_cpu_s", loop_cpu[0]}},
                                         {{"F_s", loop_f[1]}, {"B_s", loop_b[1]}, {"step_s", loop_step[1]}, {"thread_cpu_s", loop_cpu[1]}}}}});
}

// The plan with each stage's cost replaced by its compute loop measured
// here while the other stage's ran (which adds the optimizer step and the
// slowdown of two processes sharing the machine).
Plan with_concurrent_loop_costs(const Plan& plan, const RoundsMeasured& m, int64_t minibatches) {
  Plan concurrent = plan;
  for (PlanStage& s : concurrent.stages) {
    std::vector<double> loop;
    for (const auto& round : m.stage_loops) loop.push_back(round[static_cast<size_t>(s.ranks[0])]);
    const double per_mb = median(loop) / static_cast<double>(minibatches);
    const double scale = s.compute_s > 0 ? per_mb / s.compute_s : 1.0;
    s.forward_s *= scale;
    s.backward_s *= scale;
    s.compute_s = per_mb;
  }
  return concurrent;
}

// `pipedream simulate`'s prediction for this plan and schedule from the
// profiled per-layer costs (each stage alone on the machine, forward and
// backward only), and again from the concurrently measured compute loops.
void emit_simulate_vs_measured(const std::string& name, const BenchArgs& a, const Plan& plan,
                               const RoundsMeasured& m, Transport& t) {
  SimulationOptions so;
  so.schedule.minibatches = a.minibatches;
  const SimulationReport rep = simulate(plan, so);
  const SimulationReport rep_concurrent = simulate(with_concurrent_loop_costs(plan, m, a.minibatches), so);
  const double measured = median(m.pipes) / static_cast<double>(a.minibatches);
  emit(t, {{"suite", "runtime"}, {"bench", "simulate_vs_measured"}, {"model", name},
           {"predicted_time_per_minibatch_s", rep.time_per_minibatch_s},
           {"planner_time_per_minibatch_s", plan.time_per_minibatch_s},
           {"measured_time_per_minibatch_s", measured},
           {"error", (measured - rep.time_per_minibatch_s) / rep.time_per_minibatch_s},
           {"predicted_from_concurrent_loops_s", rep_concurrent.time_per_minibatch_s},
           {"error_vs_concurrent_loops",
            (measured - rep_concurrent.time_per_minibatch_s) / rep_concurrent.time_per_minibatch_s}});
}

void bench_model(const std::string& name, const BenchArgs& a, Transport& t, const Optimizer& opt) {
  const Model m = resolve_model(name);
  const std::unique_ptr<Dataset> data = synthetic_in_memory(m, a.batch);
  const Plan plan = straight_two_stage_plan(m, a.batch, t);
  const PlanStage& mine = plan.stages[static_cast<size_t>(plan.stage_of_rank(t.rank()))];
  compute_loop_seconds(m, *data, mine, a.batch, 3, opt);  // warm-up
  const WeightPolicy policy = parse_weight_policy(a.weights);
  pipeline_run(m, *data, plan, a.batch, 8, opt, t, policy);  // warm-up
  const RoundsMeasured measured = measure_rounds(m, *data, plan, a, t, opt, policy);
  emit_pipeline_vs_ceiling(name, a, plan, measured, t);
  emit_simulate_vs_measured(name, a, plan, measured, t);
}

void bench_overhead(const BenchArgs& a, Transport& t, const Optimizer& opt) {
  nlohmann::json spec = {{"name", "empty"}, {"input", {{"shape", {4}}}}, {"classes", 4}, {"layers", nlohmann::json::array()}};
  for (int i = 0; i < 4; ++i) spec["layers"].push_back({{"type", "relu"}, {"name", cat("relu", i)}});
  const Model m = build_model(spec);
  DataSplits data = open_dataset("synthetic", "", m);
  const Plan plan = two_stage_plan(m, 1);
  pipeline_run(m, *data.train, plan, 1, 100, opt, t);
  const PipelineRun run = pipeline_run(m, *data.train, plan, 1, a.overhead_minibatches, opt, t);
  const double s = max_over_ranks(t, run.seconds);
  const int64_t actions = run.actions;
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
  apply_compute_settings({.threads = 1});
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
  cmd->add_option("--rounds", a->rounds, "Rounds of ceiling, pipeline, pipeline, ceiling per model (median reported)")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  cmd->add_option("--weights", a->weights, "Weight policy of the pipeline: stash, vertical or none")
      ->capture_default_str();
  cmd->add_option("--trace", a->trace, "Write a Chrome trace of each model's pipeline run to PREFIX.<model>.json");
  cmd->callback([a] { run_bench(*a); });
}

}  // namespace pd::bench
