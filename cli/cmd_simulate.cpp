// `pipedream simulate`: replay a plan's schedule on its costs and report
// throughput, bubbles and memory (docs/design.md §7).
#include <cmath>
#include <algorithm>
#include <iomanip>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "planner/plan.h"
#include "profiler/profile.h"
#include "runtime/schedule/schedule_file.h"
#include "runtime/simulator/plan_search.h"
#include "runtime/simulator/simulator.h"
#include "runtime/simulator/timeline_svg.h"
#include "runtime/simulator/worker_memory.h"

namespace pd::cli {

namespace {

struct SimulateArgs {
  std::string plan, profile, schedule, weights = "stash", trace, schedule_file, svg;
  int64_t minibatches = 0, svg_minibatches = 0;  // minibatches 0: replay_minibatches(plan)
  int microbatches = 0, batch_size = 0, virtual_stages = 1;
  double cores = 0;  // 0: every worker has its own device
  int threads = 1;
  bool threads_given = false, weight_share_given = false;
  double contention = 0;
  double weight_gradient_share = 0.5;
  bool json = false, realistic_latency = false, recost = false;
};

ScheduleOptions schedule_options(const Plan& plan, const SimulateArgs& a, int64_t minibatches) {
  ScheduleOptions o;
  o.kind = parse_schedule_kind(a.schedule.empty() ? plan.schedule : a.schedule);
  o.policy = parse_weight_policy(a.weights);
  o.minibatches = minibatches;
  o.virtual_stages = a.virtual_stages;
  o.microbatches = microbatches_for(o.kind, a.microbatches, 0, [](int) { return 4; });
  return o;
}

// --profile must be the one the plan was made from: the same file (by
// sha256), or one of the same model whose layers carry the plan's names.
// Another model's profile would give plausible but meaningless sizes.
void check_profile_matches_plan(const Plan& plan, const Profile& profile) {
  if (!plan.profile.sha256.empty() && plan.profile.sha256 == profile.sha256) return;
  const std::string& path = profile.source_path;
  if (profile.source_kind == ProfileSource::json && !plan.profile.model.empty() && profile.model != plan.profile.model)
    throw UserError(cat("--profile ", path, ": field 'model' is '", profile.model, "' but the plan was made for '",
                        plan.profile.model, "'; pass the profile the plan was made from"));
  for (const PlanStage& st : plan.stages) {
    if (!st.nodes.empty() || st.layer_names.empty()) continue;
    for (int l = st.first_layer; l <= st.last_layer; ++l) {
      const size_t i = static_cast<size_t>(l - st.first_layer);
      if (l < 0 || l >= static_cast<int>(profile.nodes.size()) || i >= st.layer_names.size()) break;
      const std::string& name = profile.nodes[static_cast<size_t>(l)].name;
      if (name != st.layer_names[i])
        throw UserError(cat("--profile ", path, ": layer ", l, " is named '", name, "' but the plan's stage ",
                            st.index, " names it '", st.layer_names[i], "'; pass the profile the plan was made from"));
    }
  }
}

// Whether a replicated stage's all-reduce is priced as the runtime's, where
// the buckets matter.
bool prices_runtime_allreduce(const Plan& plan, const SimulationOptions& opt) {
  for (const PlanStage& st : plan.stages)
    if (waits_for_runtime_allreduce(plan, st, opt)) return true;
  return false;
}

int workers_of(const Plan& plan) {
  int workers = 0;
  for (const PlanStage& st : plan.stages) workers += st.replicas;
  return workers;
}

// The paper-style picture of the first minibatches (default: enough to
// show warm-up, steady state and drain; flush: two batches).
void write_svg(const SimulateArgs& a, const Plan& plan, const ScheduleOptions& o,
               const std::vector<TraceEvent>& events) {
  TimelineSvgOptions svg;
  svg.flush = o.microbatches > 1;  // label microbatches within their batch
  svg.worker_stages = Schedule(plan, o).stages_by_worker();
  svg.minibatches = a.svg_minibatches > 0 ? a.svg_minibatches : 2 * steps_per_period(o.kind, workers_of(plan));
  svg.minibatches = std::min(svg.minibatches, o.minibatches);
  svg.title = cat(schedule_title(o), ", plan ", plan.config.empty() ? std::string("?") : plan.config, ", first ",
                  steps_phrase(o, svg.minibatches), a.schedule_file.empty() ? "" : ", from " + a.schedule_file);
  std::ostringstream out;
  write_timeline_svg(out, plan, events, svg);
  write_file_atomically(a.svg, out.str());
}

void run_simulate(const SimulateArgs& a) {
  Plan plan = read_plan(a.plan);
  if (a.batch_size > 0) plan.profile.batch_size = a.batch_size;
  SimulationOptions opt;
  ScheduleFile file;
  if (a.schedule_file.empty()) {
    opt.schedule = schedule_options(plan, a, a.minibatches > 0 ? a.minibatches : replay_minibatches(plan));
    if (a.minibatches > 0 || a.microbatches > 0)  // the defaults are sized to the plan
      check_schedule_length("simulate", opt.schedule.minibatches, opt.schedule.microbatches, plan.workers(),
                            kMaxReplayPasses);
  } else {
    // The file's own options describe its lists; the checker must accept
    // them before the replay, which assumes they cannot deadlock.
    file = read_schedule_file(a.schedule_file);
    checked_schedule(plan, file, a.schedule_file);
    opt.schedule = file.options;
    opt.actions = &file.lists;
  }
  check_plan_topology(plan, Schedule(plan, opt.schedule).workers(), a.plan);
  if (a.weight_share_given) require_split_backward(opt.schedule, "--weight-grad-share");
  opt.realistic_latency = a.realistic_latency;
  if (!(a.cores >= 0)) throw UserError(cat("--cores must be >= 0 (0: every worker has its own device), got ", a.cores));
  if (a.threads < 1) throw UserError(cat("--threads must be >= 1, got ", a.threads));
  if (a.threads_given && a.cores == 0)
    throw UserError("--threads is the threads per worker sharing --cores: give --cores too");
  if (!(a.contention >= 0) || !std::isfinite(a.contention))
    throw UserError(cat("--contention must be a number >= 0 (e.g. 0.07: 7% slower with every core busy), got ",
                        a.contention));
  if (a.contention > 0 && a.cores == 0)
    throw UserError("--contention is what the shared cores share besides themselves: give --cores too");
  opt.cores = a.cores;
  opt.threads_per_worker = a.threads;
  opt.core_contention = a.contention;
  opt.weight_gradient_share = a.weight_gradient_share;
  // Schedules with microbatches: a microbatch's compute as measured at its
  // size when the profile has it (`profile --microbatches M`).
  const int M = opt.schedule.microbatches;
  int microbatch = 0;  // the microbatch size the profile measured, when it did
  std::string stale;   // what was done about a plan edited after planning
  if (a.recost && a.profile.empty())
    throw UserError("--recost prices the plan's stages from a profile: give --profile too");
  if (a.profile.empty()) {
    stale = refresh_stale_plan(plan, nullptr);
    if (!stale.empty()) stale += "; the stages' compute times are the stored ones, as stale: pass --profile to recompute them";
  }
  std::optional<Profile> read;
  if (!a.profile.empty()) {
    const Profile& profile = read.emplace(read_profile(a.profile));
    if (profile.precision == Precision::BF16)
      std::fprintf(stderr, "%s was measured with --precision bf16: sizes at 2 bytes an element\n", a.profile.c_str());
    // An edited plan's layer names are as stale as its costs: both come
    // from the profile again before the two are compared.
    stale = refresh_stale_plan(plan, &profile);
    check_profile_matches_plan(plan, profile);
    if (a.recost) recost_plan(plan, profile);
    set_memory_from_profile(opt, plan, profile);
    opt.gradient_buckets = gradient_buckets_from_profile(plan, profile);
    if (M > 1 && profile.batch_size % M == 0)
      opt.microbatch_times = microbatch_times_from_profile(plan, profile, profile.batch_size / M);
    if (!opt.microbatch_times.empty()) microbatch = profile.batch_size / M;
  }
  if (a.profile.empty() && prices_runtime_allreduce(plan, opt))
    std::fprintf(stderr, "note: without --profile each replicated stage's all-reduce starts after its backward; "
                         "`plan` and `simulate --profile` start its gradient buckets during the backward, as "
                         "`run` does\n");
  opt.record_trace = !a.trace.empty() || !a.svg.empty();
  std::vector<TraceEvent> events;
  SimulationReport rep = simulate(plan, opt, &events);
  if (read) {  // each worker's memory at its peak, `run`'s measured figure
    const std::vector<double> memory = predicted_worker_memory(plan, *read, rep);
    for (WorkerReport& w : rep.workers) w.predicted_memory_bytes = memory.at(static_cast<size_t>(w.rank));
  }
  if (!a.trace.empty()) {
    std::ostringstream out;
    write_chrome_trace(out, plan, events, opt.schedule);
    write_file_atomically(a.trace, out.str());
  }
  if (!a.svg.empty()) write_svg(a, plan, opt.schedule, events);
  if (a.json) {
    nlohmann::json j = report_to_json(rep);
    if (opt.cores > 0) {
      j["cores"] = opt.cores;
      j["threads_per_worker"] = opt.threads_per_worker;
    }
    if (M > 1) j["microbatch_compute"] = opt.microbatch_times.empty() ? "linear" : "measured";
    if (!stale.empty()) j["stale_plan"] = stale;
    std::cout << j.dump() << "\n";
    return;
  }
  if (!stale.empty()) std::cout << "note: " << a.plan << ": " << stale << "\n";
  std::cout << format_report(rep);
  if (opt.cores > 0)
    std::cout << "workers share " << opt.cores << " cores, " << opt.threads_per_worker
              << " thread(s) each (processor sharing)\n";
  if (plan.profile.batch_size <= 0)
    std::cout << "(the plan's profile records no batch size, so throughput is unknown; pass --batch-size)\n";
  // The plan's time is for its own schedule (the planner's: 1f1b-rr minibatches).
  if (!plan.stages.empty() && plan.time_per_minibatch_s > 0 && opt.schedule.microbatches == 1 &&
      opt.schedule.kind->name() == plan.schedule)
    std::cout << "planner's prediction: " << plan.time_per_minibatch_s << " s per minibatch (simulated "
              << std::showpos << std::fixed << std::setprecision(2)
              << (rep.time_per_minibatch_s / plan.time_per_minibatch_s - 1) * 100 << std::noshowpos
              << std::defaultfloat << "%)\n";
  if (opt.stashed_bytes.empty())
    std::cout << "(stashed bytes per minibatch estimated by each stage's output; pass --profile for exact sizes)\n";
  if (M > 1 && opt.microbatch_times.empty())
    std::cout << "(a microbatch's compute is taken as 1/" << M << " of the minibatch's, which undercounts small "
              << "microbatches; `pipedream profile --microbatches " << M << "` measures it, pass that --profile)\n";
  else if (M > 1)
    std::cout << "microbatch compute measured at batch " << microbatch << " (the profile's at_batch times)\n";
  if (!a.trace.empty()) std::cout << "trace written to " << a.trace << " (open in https://ui.perfetto.dev)\n";
  if (!a.svg.empty()) std::cout << "timeline written to " << a.svg << "\n";
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto args = std::make_shared<SimulateArgs>();
  auto* cmd = app.add_subcommand("simulate", "Replay a plan's schedule on its costs: throughput, bubbles, memory");
  cmd->add_option("--plan", args->plan, "plan.json from `pipedream plan`")->required()->check(CLI::ExistingFile);
  cmd->add_option("--profile", args->profile,
                  "the plan's profile: exact stashed-activation bytes per stage, microbatch times, and replicated "
                  "stages' gradient buckets started during the backward (as `plan` prices them)")
      ->check(CLI::ExistingFile);
  auto* minibatches = cmd->add_option("--minibatches", args->minibatches,
                                      "minibatches to replay (batches for gpipe/1f1b-flush); default 1000, or 8 per replica of the widest stage");
  auto* schedule = cmd->add_option("--schedule", args->schedule, schedule_flag_help());
  auto* virtual_stages = cmd->add_option("--virtual-stages", args->virtual_stages, virtual_stages_flag_help());
  auto* weight_share = cmd->add_option("--weight-grad-share", args->weight_gradient_share,
                  split_backward_flag_help("the fraction of a stage's backward time its W (weight gradient) takes; "
                                           "B the rest (default 0.5: dX and dW are products of the same size)"));
  auto* weights = cmd->add_option("--weights", args->weights, weights_flag_help());
  auto* microbatches = cmd->add_option("--microbatches", args->microbatches,
                                       microbatches_flag_help("microbatches per batch (default 4)"));
  cmd->add_option("--schedule-file", args->schedule_file,
                  "replay this schedule (JSON or CSV from `pipedream schedule --format`, possibly edited) after "
                  "checking it; it sets the schedule, weights, microbatches and minibatches")
      ->check(CLI::ExistingFile)
      ->excludes(minibatches)
      ->excludes(schedule)
      ->excludes(weights)
      ->excludes(virtual_stages)
      ->excludes(microbatches);
  auto* svg = cmd->add_option("--svg", args->svg,
                  "draw the pipeline timeline (one row per worker, F/B/all-reduce/idle) as an SVG picture");
  cmd->add_option("--svg-minibatches", args->svg_minibatches,
                  "the picture spans the first N minibatches (flush: batches); default 2 x workers + 2 (flush: 2)")
      ->needs(svg);
  cmd->add_option("--batch-size", args->batch_size,
                  "samples per minibatch for the throughput (default: the plan's profile)");
  cmd->add_option("--cores", args->cores,
                  "the workers run on one machine with N cores and share them (processor sharing: n computing "
                  "workers of T threads run at min(1, N / (n T)) of their profiled speed); N may be fractional "
                  "(a CPU quota); default 0: every worker has a device of its own, as the planner assumes");
  auto* threads = cmd->add_option("--threads", args->threads,
                                  "with --cores: compute threads per worker, as profiled (default 1)");
  cmd->add_option("--contention", args->contention,
                  "with --cores: computations run 1 + F times slower while every core computes (memory bandwidth "
                  "and caches the cores share; in proportion when fewer are busy); measure F as the slowdown of the "
                  "profiled step run on every core at once (bench/shared_cores.sh does); default 0");
  cmd->add_option("--trace", args->trace, "write a Chrome-trace timeline (Perfetto, chrome://tracing)");
  cmd->add_flag("--recost", args->recost,
                "the stages' compute times and sizes from --profile, not the ones stored at planning: the same "
                "split priced on another profile of the model (e.g. one taken nearer the run)");
  cmd->add_flag("--json", args->json, "print the report as one JSON object");
  cmd->add_flag("--realistic-latency", args->realistic_latency,
                "messages arrive when their last byte does and steps wait for their all-reduce to end "
                "(default: the planner's steady state, where links and all-reduces limit throughput only)");
  cmd->callback([args, threads, weight_share] {
    args->threads_given = threads->count() > 0;
    args->weight_share_given = weight_share->count() > 0;
    run_simulate(*args);
  });
}

}  // namespace pd::cli
