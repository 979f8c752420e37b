// `pipedream run`: pipelined training with a plan, one process per worker
// (docs/design.md §8). Outside MPI it re-launches itself under mpirun; with
// --reference it executes every worker in this process (the oracle).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <numeric>
#include <thread>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/compute_settings.h"
#include "core/error.h"
#include "core/text.h"
#include "core/safetensors.h"
#include "planner/planner.h"
#include "runtime/graph_stages.h"
#include "runtime/tied_gradients.h"
#include "runtime/auto_plan.h"
#include "runtime/checkpoint.h"
#include "core/cuda_plugin.h"
#include "runtime/comm/mpi_transport.h"
#include "runtime/comm/nccl_transport.h"
#include "runtime/comm/staged_transport.h"
#include "models/loader.h"
#include "runtime/launcher.h"
#include "runtime/local_transport.h"
#include "runtime/metrics.h"
#include "runtime/pipeline_worker.h"
#include "runtime/reference.h"
#include "runtime/run_report.h"
#include "runtime/schedule/check.h"
#include "runtime/schedule/schedule_file.h"
#include "runtime/simulator/simulator.h"
#include "runtime/simulator/worker_memory.h"
#include "runtime/trainer.h"

namespace pd::cli {

namespace {

struct RunArgs {
  std::string hostfile;  // --hostfile: mpirun's, for the self-launch
  std::string plan, plan_out = "plan-auto.json", model, spec_file, model_options, data = "fashion-mnist", data_dir,
      data_options;
  int workers = 0;
  int64_t epochs = 0, minibatches = 0;
  int64_t batch = 0;  // 0: not given (the plan's recorded batch, else kDefaultBatch)
  std::string schedule, weights = "stash", schedule_file;
  int microbatches = 0, virtual_stages = 0;  // 0: not given (the plan's, else the default)
  OptimizerConfig optimizer;
  LrSchedule lr;
  float clip_grad_norm = 0;  // --clip-grad-norm; 0: off
  std::string optimizer_flag = "sgd", lr_schedule = "constant";  // parsed into optimizer.kind and lr.kind
  uint64_t seed = 0;
  int threads = 1;
  int loader_threads = -1;  // not given: the cores the compute threads leave
  double timeout = 60;
  std::string metrics, save, trace, svg, checkpoint_dir, resume;
  std::vector<std::string> init;
  int64_t svg_minibatches = 0;
  int64_t checkpoint_every = 0, log_every = 10, eval_every = 0, eval_batch = 500;
  int64_t keep_checkpoints = -1;  // not given: kDefaultKeepCheckpoints
  bool evaluate = true, reference = false, progress = false, straight = false;
  std::string device = "cpu", transport = "staged";
  bool deterministic = false;
  Precision precision = Precision::FP32;  // --precision, parsed
  std::string precision_flag = "fp32";
  bool allow_tf32 = false;
  std::string memory, recompute;  // --plan auto: the planner's memory limit and --recompute
};

constexpr int64_t kDefaultBatch = 64;

// Every way the plan can disagree with the model, as a UserError.
void check_plan_fits_model(const Plan& plan, const Model& model, const std::string& source) {
  if (!plan.profile.model.empty() && plan.profile.model != model.name)
    throw UserError(cat(source, " was planned for model '", plan.profile.model, "' but --model is '", model.name, "'"));
  const int last = plan.stages.back().last_layer;
  if (last != model.size() - 1)
    throw UserError(cat(source, ": the stages cover layers 0..", last, " but ", model.name, " has ", model.size(),
                        " top-level layers (0..", model.size() - 1, ")"));
  for (const PlanStage& s : plan.stages) {
    if (s.layer_names.empty()) continue;
    if (static_cast<int>(s.layer_names.size()) != s.last_layer - s.first_layer + 1)
      throw UserError(cat(source, ": stages[", s.index, "] lists ", s.layer_names.size(), " layer_names for layers ",
                          s.first_layer, "..", s.last_layer));
    for (int l = s.first_layer; l <= s.last_layer; ++l) {
      const std::string& want = model.layers[static_cast<size_t>(l)].name;
      const std::string& got = s.layer_names[static_cast<size_t>(l - s.first_layer)];
      if (got != want)
        throw UserError(cat(source, ": stages[", s.index, "] names layer ", l, " '", got, "' but the model's layer ", l,
                            " is '", want, "' (plan made for another model?)"));
    }
  }
}

// The workers read the plan file the launcher wrote (--plan auto): the
// same arguments with --plan FILE and without --workers / --straight /
// --plan-out / --memory / --recompute, which a plan file refuses.
std::vector<std::string> with_plan_file(const std::vector<std::string>& args, const std::string& plan_path) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& x = args[i];
    if ((x == "--plan" || x == "--workers" || x == "--plan-out" || x == "--memory" || x == "--recompute") &&
        i + 1 < args.size()) {
      if (x == "--plan") out.insert(out.end(), {"--plan", plan_path});
      ++i;
    } else if (x.rfind("--plan=", 0) == 0) {
      out.insert(out.end(), {"--plan", plan_path});
    } else if (x.rfind("--workers=", 0) != 0 && x.rfind("--plan-out=", 0) != 0 && x.rfind("--memory=", 0) != 0 &&
               x.rfind("--recompute=", 0) != 0 && x != "--straight") {
      out.push_back(x);
    }
  }
  return out;
}

// Without --microbatches: one microbatch per worker, or the next count that
// splits --batch evenly and is a multiple of what the schedule needs
// (interleaved-1f1b: the workers).
int default_microbatches(int64_t batch, int workers, int multiple) {
  for (int64_t m = std::max(1, workers); batch > 0 && m <= batch; ++m)
    if (batch % m == 0 && m % multiple == 0) return static_cast<int>(m);
  return std::max(1, workers);
}

// The schedule: from the flags, or from a checked --schedule-file (which
// sets kind, weights, microbatches, virtual stages and steps itself).
void set_schedule(const RunArgs& a, const Plan& plan, RunSpec& s) {
  ScheduleFile file;
  if (!a.schedule_file.empty()) {
    // Checked now, in every process: a rejected file exits 2 naming its
    // first bad action before any worker starts.
    file = read_schedule_file(a.schedule_file);
    checked_schedule(plan, file, a.schedule_file);
    if (!a.checkpoint_dir.empty() || !a.resume.empty())
      throw UserError("--schedule-file runs its lists as one segment: it does not checkpoint or resume");
    if (!a.schedule.empty() || a.microbatches != 0 || a.virtual_stages > 1 || a.weights != "stash")
      throw UserError("--schedule-file sets the schedule, weights, microbatches and virtual stages: drop "
                      "--schedule, --weights, --microbatches and --virtual-stages");
  }
  s.schedule.kind = a.schedule_file.empty() ? parse_schedule_kind(a.schedule.empty() ? plan.schedule : a.schedule)
                                            : file.options.kind;
  s.schedule.policy = a.schedule_file.empty() ? parse_weight_policy(a.weights) : file.options.policy;
  // The plan's microbatches and virtual stages where it was made for this
  // schedule (and the flags do not say otherwise).
  const bool plans_this = plan.schedule == s.schedule.kind->name();
  const int virtual_stages =
      a.virtual_stages > 0 ? a.virtual_stages : plans_this && plan.virtual_stages > 0 ? plan.virtual_stages : 1;
  s.schedule.virtual_stages = a.schedule_file.empty() ? virtual_stages : file.options.virtual_stages;
  // Registry question (counted in runtime/schedule/README.md): the workers
  // a plan's stages fill under this placement, needed for the microbatch
  // count before a Schedule can be built.
  const int workers = plan.workers() / std::max(1, stages_per_worker(s.schedule.kind, s.schedule.virtual_stages));
  const bool plan_microbatches = plans_this && plan.microbatches > 0 && (plan.batch == 0 || plan.batch == a.batch);
  s.schedule.microbatches = microbatches_for(s.schedule.kind, a.microbatches, workers, [&](int multiple) {
    return plan_microbatches ? plan.microbatches : default_microbatches(a.batch, workers, multiple);
  });
  // (A --weights that does not apply is refused by the Schedule, naming the flag's schedules.)
  if (!a.checkpoint_dir.empty() || !a.resume.empty())
    require_checkpoints(s.schedule, !a.resume.empty() ? "--resume" : "--checkpoint-dir");
  if (!a.schedule_file.empty()) {
    s.schedule = file.options;  // schedule, weights, microbatches, steps
    s.schedule_lists = std::make_shared<const std::vector<std::vector<Action>>>(std::move(file.lists));
  }
}

// Outputs, evaluation and checkpoints (a resumed run keeps the original's
// checkpoint boundaries).
void set_outputs(const RunArgs& a, RunSpec& s) {
  s.evaluate = a.evaluate;
  s.eval_every = a.eval_every;
  s.eval_batch = a.eval_batch;
  s.metrics = a.metrics;
  s.save = a.save;
  s.trace = a.trace;
  s.svg = a.svg;
  s.svg_minibatches = a.svg_minibatches;
  s.checkpoint_dir = a.checkpoint_dir;
  s.checkpoint_every = a.checkpoint_every;
  if (s.checkpoint_every < 0) throw UserError("--checkpoint-every must be >= 0");
  s.keep_checkpoints = a.keep_checkpoints < 0 ? kDefaultKeepCheckpoints : a.keep_checkpoints;
  if (a.keep_checkpoints > 0 && a.checkpoint_dir.empty()) throw UserError("--keep-checkpoints needs --checkpoint-dir");
  s.resume = a.resume;
  s.init = a.init;
  if (!s.resume.empty()) {
    // Where the pipeline drains at every checkpoint (runtime/run_spec.h), a
    // resumed run keeps the same boundaries to repeat the original's bits.
    const ResumePoint p = find_checkpoint(s.resume);
    const int64_t saved_every = p.run.value("checkpoint_every", int64_t{0});
    if (s.checkpoint_every == 0) s.checkpoint_every = saved_every;
  } else if (s.checkpoint_dir.empty() && a.checkpoint_every > 0) {
    throw UserError("--checkpoint-every needs --checkpoint-dir");
  }
  if (!s.checkpoint_dir.empty() && s.checkpoint_every == 0) s.checkpoint_every = s.steps();
  // 1f1b-rr: a replicated stage's versions advance by its replica count, so
  // every stage passes the same version only at multiples of all of them.
  int64_t common = 1;
  for (const PlanStage& st : s.plan.stages) common = std::lcm(common, version_stride(s.schedule, st.replicas));
  if (checkpoints_inside_schedule(s) && s.checkpoint_every > 0 && s.checkpoint_every < s.steps() &&
      s.checkpoint_every % common != 0)
    throw UserError(cat("--checkpoint-every ", s.checkpoint_every, ": plan ", s.plan.config,
                        " replicates stages, so 1f1b-rr checkpoints fall where every stage has absorbed the same "
                        "minibatches: use a multiple of ", common));
}

// The schedule refuses what it cannot run; its invariants are checked on
// a short run of the same shape (the lists are periodic). A file's lists
// were checked whole by checked_schedule.
void require_runnable_schedule(const Plan& plan, const RunSpec& s) {
  const Schedule full(plan, s.schedule);
  if (s.schedule_lists) return;
  ScheduleOptions shortened = s.schedule;
  shortened.minibatches = std::min<int64_t>(s.steps(), 4 * steps_per_period(s.schedule.kind, full.workers()) + 4);
  const Schedule check(plan, shortened);
  require_valid_schedule(check, build_schedule(plan, shortened));
}

// --batch is the minibatch, the samples of one optimizer step, for every
// schedule (as for `train` and `profile`); a flush schedule splits it into
// M microbatches of batch / M.
int64_t microbatch_size(int64_t batch, int microbatches) {
  if (batch <= 0) throw UserError(cat("--batch must be positive, got ", batch));
  if (batch % microbatches != 0)
    throw UserError(cat("--batch ", batch, " does not split into ", microbatches, " equal microbatches (--microbatches ",
                        microbatches, "): give a --batch divisible by it, or --microbatches that divides ", batch));
  return batch / microbatches;
}

RunSpec make_spec(const RunArgs& a, const Plan& plan, int64_t train_size) {
  RunSpec s;
  s.plan = plan;
  set_schedule(a, plan, s);
  s.batch = microbatch_size(a.batch, s.schedule.microbatches);
  if (a.schedule_file.empty() && (a.epochs > 0) == (a.minibatches > 0))
    throw UserError("give exactly one of --epochs N and --minibatches K (both positive)");
  const int64_t per_epoch = s.steps_per_epoch(train_size);
  if (per_epoch == 0)
    throw UserError(cat("a step takes ", s.samples_per_step(), " samples, more than the training set's ", train_size));
  if (!s.schedule_lists) s.schedule.minibatches = a.epochs > 0 ? a.epochs * per_epoch : a.minibatches;
  s.seed = a.seed;
  s.precision = a.precision;
  s.loader_threads = a.loader_threads >= 0 ? a.loader_threads
                                           : default_loader_threads(Device::parse(a.device).is_cpu() ? a.threads : 1);
  s.optimizer = a.optimizer;
  s.lr = a.lr;
  s.lr.base_lr = a.optimizer.lr;
  s.clip_grad_norm = a.clip_grad_norm;
  require_clipping_supported(s);
  if (s.lr.total_steps == 0) s.lr.total_steps = s.steps();
  validate(s.lr);
  if (a.threads < 1) throw UserError(cat("--threads-per-worker must be >= 1, got ", a.threads));
  s.threads = a.threads;
  s.device = Device::parse(a.device);
  if (a.transport == "staged") s.transport = DeviceTransport::staged;
  else if (a.transport == "nccl") s.transport = DeviceTransport::nccl;
  else throw UserError(cat("--transport ", a.transport, ": use staged (host-staged MPI, bitwise equal to --reference) or nccl"));
  if (s.transport == DeviceTransport::nccl && s.device.is_cpu())
    throw UserError("--transport nccl carries GPU tensors: use it with --device cuda (CPU runs always use MPI)");
  if (s.transport == DeviceTransport::nccl && a.reference)
    throw UserError("--reference runs every worker in one process: --transport nccl does not apply");
  if (!(a.timeout > 0)) throw UserError(cat("--timeout must be positive, got ", a.timeout));
  s.timeout_s = a.timeout;
  set_outputs(a, s);
  if (a.log_every < 1) throw UserError(cat("--log-every must be >= 1, got ", a.log_every));
  s.log_every = a.log_every;
  s.progress_bar = a.progress;
  require_runnable_schedule(plan, s);
  return s;
}

// A graph model staged by its plan: what each stage hands the next (the
// units it runs, and the tensors crossing its cut, skips included).
std::string graph_stage_text(const PlanStage& s, const Model& m) {
  const nlohmann::json& layers = m.spec.at("layers");
  const size_t l = static_cast<size_t>(s.first_layer);
  if (!m.graph || l >= layers.size() || !layers[l].contains("boundary_tensors")) return "";
  const int tensors = layers[l]["boundary_tensors"].get<int>();
  if (s.index + 1 == static_cast<int>(layers.size())) return cat(", ", s.nodes.size(), " units");
  return cat(", ", s.nodes.size(), " units, sends ", tensors, tensors == 1 ? " tensor" : " tensors");
}

// Schedules that run several of the plan's stages on each worker
// (interleaved-1f1b, the V shapes): the header and every stage name the
// workers that run them, where the schedule places them, not the plan's ranks.
void print_plan(const Plan& p, const Model& m, const ScheduleOptions& schedule) {
  const Schedule placed(p, schedule);
  const int v = placed.chunks();
  const int workers = placed.workers();
  if (v > 1)
    std::fprintf(stderr, "plan %s: %zu stages on %d workers (%s: %d stages per worker)\n",
                 p.config.c_str(), p.stages.size(), workers, to_string(schedule.kind).c_str(), v);
  else
    std::fprintf(stderr, "plan %s: %zu stages on %d workers\n", p.config.c_str(), p.stages.size(), workers);
  for (const PlanStage& s : p.stages) {
    std::string ranks;
    for (int r : s.ranks) ranks += (ranks.empty() ? "" : ",") + std::to_string(v > 1 ? placed.place(s.index).worker : r);
    const std::string& first = m.layers[static_cast<size_t>(s.first_layer)].name;
    const std::string& last = m.layers[static_cast<size_t>(s.last_layer)].name;
    const std::string layers = s.first_layer == s.last_layer ? cat("layer ", s.first_layer, " (", first)
                                                             : cat("layers ", s.first_layer, "..", s.last_layer, " (",
                                                                   first, " .. ", last);
    std::fprintf(stderr, "  stage %d: %s%s) on %s%s %s\n", s.index, layers.c_str(), graph_stage_text(s, m).c_str(),
                 v > 1 ? "worker" : "rank", s.ranks.size() > 1 ? "s" : "", ranks.c_str());
  }
}

// What this process computes with, applied once (core/compute_settings.h):
// before --plan auto profiles and before a worker or --reference computes,
// not in a launcher that only starts mpirun. Returns the device.
Device apply_run_settings(const RunArgs& a) {
  const Device device = resolve_compute_device(a.device);
  apply_compute_settings({.device = device, .threads = a.threads, .precision = a.precision,
                          .deterministic = a.deterministic, .allow_tf32 = a.allow_tf32});
  return device;
}

// --reference: all workers here, in a valid global order.
void run_reference(const RunSpec& spec, const Model& model, const DataSplits& data) {
  if (spec.device.is_cuda())
    std::fprintf(stderr, "reference on %s: every worker in this process, messages staged through the host\n",
                 spec.device.str().c_str());
  MetricsWriter metrics(spec.metrics);
  ProgressBar bar(spec.steps(), spec.progress_bar || ProgressBar::stderr_is_terminal());
  RunReporter report(metrics, &bar, spec.steps(), spec.steps_per_epoch(data.train->size()),
                     spec.schedule.microbatches, spec.samples_per_step(), spec.log_every);
  report.set_learning_rates(spec.lr);
  ReferencePipeline ref(spec, model, *data.train);
  for (const Segment& seg : run_segments(spec, 0)) ref.run_segment(seg, &report);
  bar.finish();
  NamedTensors merged = ref.merged_weights();
  std::printf("reference: %lld steps of plan %s (%s) in one process in %.1f s",
              static_cast<long long>(spec.steps()), spec.plan.config.c_str(),
              schedule_summary(spec.schedule, spec.batch).c_str(), report.seconds());
  if (spec.evaluate && data.test) {
    ParameterStore w = ParameterStore::create(model, spec.seed, spec.device);
    w.load(merged, "the reference run");
    const EvalResult e = evaluate(model, w, *data.test, spec.eval_batch, spec.precision);
    metrics.eval(spec.steps_per_epoch(data.train->size()) > 0 ? (spec.steps() - 1) / spec.steps_per_epoch(data.train->size()) : 0,
                 e.loss, e.accuracy);
    std::printf(", test loss %.4f, test accuracy %.2f%%", e.loss, 100.0 * e.accuracy);
  }
  std::printf("\n");
  if (!spec.save.empty()) {
    save_safetensors(spec.save, merged,
                     {{"model", model.name}, {"spec", model.spec.dump()}, {"steps", std::to_string(spec.steps())}});
    std::printf("saved weights to %s\n", spec.save.c_str());
  }
}

// The links a pipeline uses, for NCCL: every pair of ranks of adjacent
// stages in both directions, those of the stages a tied parameter joins
// (runtime/tied_gradients.h), and each replicated stage's group.
NcclLinks pipeline_links(const Plan& plan, const TiedStages* ties) {
  NcclLinks l;
  auto link = [&](const PlanStage& x, const PlanStage& y) {
    for (int a : x.ranks)
      for (int b : y.ranks) {
        for (auto p : {std::make_pair(a, b), std::make_pair(b, a)})
          if (std::find(l.p2p.begin(), l.p2p.end(), p) == l.p2p.end()) l.p2p.push_back(p);
      }
  };
  for (size_t s = 0; s + 1 < plan.stages.size(); ++s) link(plan.stages[s], plan.stages[s + 1]);
  if (ties)
    for (const TiedStages::Group& g : ties->groups)
      for (const TiedStages::Member& m : g.members)
        for (const TiedStages::Member& n : g.members)
          if (m.stage < n.stage) link(plan.stages[size_t(m.stage)], plan.stages[size_t(n.stage)]);
  for (const PlanStage& s : plan.stages)
    if (s.ranks.size() > 1) l.groups.push_back(s.ranks);
  return l;
}

// One MPI worker: on a GPU, device tensors travel staged through the host
// (default, bitwise equal to --reference) or over NCCL.
// Ranks on several hosts: rank 0 says which run where (the plan's innermost
// level says which ranks should share a host).
void print_placement(const Plan& plan, const Transport& t) {
  if (t.rank() != 0) return;
  std::vector<std::string> hosts;
  for (int r = 0; r < t.world_size(); ++r) hosts.push_back(t.host_of(r));
  std::vector<std::vector<int>> stages(hosts.size());
  for (const auto& st : plan.stages)
    for (int r : st.ranks)
      if (r >= 0 && r < static_cast<int>(stages.size())) stages[static_cast<size_t>(r)].push_back(st.index);
  const int innermost = plan.topology.levels.empty() ? 1 : plan.topology.levels.front().count;
  const std::string text = placement_text(hosts, stages, innermost);
  if (!text.empty()) std::fprintf(stderr, "placement:\n%s", text.c_str());
  std::fflush(stderr);
}

void run_mpi_worker(RunSpec& spec, const RunArgs& a, const Model& model, const DataSplits& data) {
  // An abort's reason goes to the launcher, which prints the first one once.
  set_abort_reporter(&report_error_to_launcher);
  MpiTransport t(spec.timeout_s);
  print_placement(spec.plan, t);
  spec.device = apply_run_settings(a);
  if (spec.device.is_cpu()) {
    run_pipeline_worker(spec, model, data, t);
    return;
  }
  if (spec.transport == DeviceTransport::nccl) {
    NcclTransport nccl(t, spec.device, pipeline_links(spec.plan, tied_stages(model, spec.plan, spec.schedule.kind).get()));
    run_pipeline_worker(spec, model, data, nccl);
    return;
  }
  StagedTransport staged(t);
  run_pipeline_worker(spec, model, data, staged);
}

// --plan auto with a flush schedule profiles one microbatch (--batch / M):
// the plan's stage times are microbatch times, balanced for the flush run.
// 1: a 1f1b-rr run, which profiles the whole --batch.
int auto_plan_microbatches(const RunArgs& a) {
  if (!a.schedule_file.empty() || a.schedule.empty()) return 1;
  return microbatches_for(parse_schedule_kind(a.schedule), a.microbatches, a.workers,
                          [&](int multiple) { return default_microbatches(a.batch, a.workers, multiple); });
}

// --plan auto --schedule X (a flush schedule): the plan becomes X's, with
// its microbatches, virtual stages and batch, and X's replayed prediction
// (batches of M microbatches of the profiled size; interleaved-1f1b: none).
void plan_for_schedule(Plan& plan, const Profile& profile, const ScheduleKind* kind, int microbatches,
                       int virtual_stages, int per_worker, int64_t batch, int threads, int cores) {
  plan.schedule = kind->name();
  plan.microbatches = microbatches;
  plan.virtual_stages = virtual_stages;
  plan.batch = batch;
  ScheduleOptions s;
  s.kind = kind;
  s.microbatches = microbatches;
  s.virtual_stages = virtual_stages;
  // X's memory in place of 1f1b-rr's: each stage's worker at its peak under X.
  const std::vector<double> memory = predicted_stage_memory(plan, profile, s);
  for (size_t i = 0; i < plan.stages.size(); ++i) plan.stages[i].memory_bytes = uint64_t(memory[i]);
  if (per_worker > 1) {  // replayed on one stage per worker only
    set_predicted_time(plan, 0, PredictedBy::replay);
    plan.throughput_samples_per_s = 0;
    return;
  }
  const double samples_per_s = flush_samples_per_s(plan, s, threads, cores);
  set_predicted_time(plan, samples_per_s > 0 ? double(batch) / samples_per_s : 0, PredictedBy::replay);
  plan.throughput_samples_per_s = samples_per_s;
}

void print_flush_prediction(const RunArgs& a, const Plan& plan) {
  if (plan.microbatches < 1 || plan.throughput_samples_per_s <= 0 || plan.schedule == default_schedule_kind()->name())
    return;
  std::fprintf(stderr, "for %s (batches of %lld: %d microbatches of %d): predicted %.0f samples/s\n",
               plan.schedule.c_str(), static_cast<long long>(a.batch), plan.microbatches,
               plan.profile.batch_size, plan.throughput_samples_per_s);
}

void run_command(const RunArgs& given) {
  RunArgs a = given;  // --batch resolved below, from the plan where it records one
  // Refused before any work: an output path that is a folder.
  for (const auto& [flag, path] : {std::pair<const char*, const std::string&>{"--metrics", a.metrics},
                                   {"--save", a.save}, {"--trace", a.trace}, {"--svg", a.svg}, {"--plan-out", a.plan_out}})
    check_output_file(flag, path);
  make_optimizer(a.optimizer);  // validates before anything is read
  require_compute_device(a.device);  // no CUDA build / no GPU: refused before any work
  Model model = resolve_model(a.model, a.spec_file, a.model_options);
  const bool under_mpi = launched_under_mpi();
  std::string plan_path = a.plan;
  Plan plan;
  if (a.plan == "auto") {
    if (launched_under_mpi())
      throw UserError("--plan auto profiles and plans before it starts the workers: run it without mpirun, "
                      "or plan first and give --plan plan.json");
    if (a.workers < 1) throw UserError("--plan auto needs --workers N");
    if (a.batch == 0) a.batch = kDefaultBatch;
    const Device device = apply_run_settings(a);
    const int M = auto_plan_microbatches(a);
    const int64_t profiled = microbatch_size(a.batch, M);
    const std::string what = M > 1 ? cat("microbatch ", profiled, " = --batch ", a.batch, " / ", M)
                                   : cat("batch ", profiled);
    std::fprintf(stderr, "profiling %s (%s, %s)...\n", model.name.c_str(), what.c_str(),
                 device.is_cpu() ? cat(a.threads, " thread", a.threads > 1 ? "s" : "", " per worker").c_str()
                                 : device.str().c_str());
    const Profile profile = measure_layer_profile(model, profiled, a.threads, a.optimizer, device, a.precision,
                                                  a.allow_tf32);
    const int cores = int(std::thread::hardware_concurrency());
    // interleaved-1f1b: --workers workers run --virtual-stages stages each,
    // one worker per stage.
    // A flush schedule (--schedule X): a straight plan balanced for its
    // microbatches, recorded as X's with its microbatches and batch.
    const ScheduleKind* kind = a.schedule.empty() || !a.schedule_file.empty() ? default_schedule_kind()
                                                                              : parse_schedule_kind(a.schedule);
    const int v = std::max(1, a.virtual_stages);
    // Registry question (counted in runtime/schedule/README.md): how many
    // stages to plan per worker, before any plan or Schedule exists.
    const int per_worker = stages_per_worker(kind, v);
    const int stages = per_worker * a.workers;
    const uint64_t memory = a.memory.empty() ? 0 : parse_size(a.memory);
    // Registry question (one of the sites runtime/schedule/README.md
    // counts): 1f1b-rr runs the planner's replicated plan; a schedule that
    // flushes runs a straight plan recorded as its own (no plan exists yet
    // to ask instead).
    const bool plan_of_its_own = kind->flushes();
    ScheduleOptions flushing;  // a flush schedule's own memory prices the plan under --memory
    flushing.kind = kind;
    flushing.microbatches = M;
    flushing.virtual_stages = v;
    plan = plan_for_workers(profile, stages, a.straight || plan_of_its_own, device.is_cpu() ? a.threads : 1,
                            device.is_cpu() ? cores : 0, 4.0, memory, recompute_mode_option(a.recompute, memory > 0),
                            plan_of_its_own ? &flushing : nullptr, a.batch);
    plan.batch = a.batch;
    if (plan_of_its_own) plan_for_schedule(plan, profile, kind, M, v, per_worker, a.batch, device.is_cpu() ? a.threads : 1,
                                           device.is_cpu() ? cores : 0);
    plan_path = a.plan_out;
    write_plan(plan, plan_path);
    if (plan.predicted_by == PredictedBy::shared_cores)
      std::fprintf(stderr, "%d workers x %d threads share %d cores: the cores, not the pipeline, bound a minibatch "
                   "(%s of compute per minibatch over %d cores)\n", a.workers, a.threads, cores,
                   seconds_text(plan.shared_cores_bound_s * cores / a.threads).c_str(), cores);
    if (per_worker > 1) {
      std::fprintf(stderr, "planned %d stages for %d workers x %d stages each: config %s; plan written to %s\n",
                   stages, a.workers, per_worker, plan.config.c_str(), plan_path.c_str());
    } else {
      // Graph-shaped (ONNX) profiles have no one-worker baseline.
      char speedup[64] = "";
      if (plan.speedup_vs_single > 0) std::snprintf(speedup, sizeof speedup, " (%.2fx one worker)", plan.speedup_vs_single);
      std::fprintf(stderr, "planned %d workers: config %s, predicted %.0f samples/s%s; plan written to %s\n",
                   a.workers, plan.config.c_str(), plan.throughput_samples_per_s, speedup, plan_path.c_str());
    }
    print_flush_prediction(a, plan);
  } else {
    if (a.workers != 0 || a.straight || !a.memory.empty() || !a.recompute.empty())
      throw UserError("--workers, --straight, --memory and --recompute go with --plan auto (a plan file fixes the "
                      "workers and what each stage recomputes)");
    plan = read_plan(a.plan);
    if (a.batch == 0) a.batch = plan.batch > 0 ? plan.batch : kDefaultBatch;
    const std::string stale = refresh_stale_plan(plan, nullptr);
    if (!stale.empty() && speaks_for_the_job())
      std::fprintf(stderr, "note: %s: %s; the run is not compared with them\n", a.plan.c_str(), stale.c_str());
  }
  if (plan_places_units(plan, model)) stage_graph_model(model, plan, plan_path);
  check_plan_fits_model(plan, model, plan_path);
  // Each worker loads its stage's part; a file that does not fit the model is refused here, before any start.
  if (!a.init.empty() && !under_mpi) load_named_weights(model, a.init);
  DataSplits data = open_dataset(a.data, a.data_dir, model, parse_data_options(a.data_options));
  RunArgs args = a;
  RunSpec spec = make_spec(args, plan, data.train->size());
  (void)tied_stages(model, spec.plan, spec.schedule.kind);  // a tie across stages: 1f1b-rr and 2bw refused here
  // Checked here, in the launcher too: a refusal is one line, before mpirun.
  if (!spec.resume.empty()) require_resumable(find_checkpoint(spec.resume), spec, model);
  // An interrupted run's unfinished checkpoints, removed before any worker writes.
  if (!under_mpi && !spec.checkpoint_dir.empty()) remove_partial_checkpoints(spec.checkpoint_dir);
  // Processes: one per worker (interleaved-1f1b: a worker runs v stages).
  const int R = Schedule(spec.plan, spec.schedule).workers();
  check_plan_topology(spec.plan, R, plan_path);
  if (under_mpi && !a.reference) require_world_size(R, launcher_world_size());

  if (a.reference) {
    print_plan(plan, model, spec.schedule);
    spec.device = apply_run_settings(a);
    run_reference(spec, model, data);
    return;
  }
  if (!under_mpi && R > 1) {
    // One command starts the run: the same arguments under mpirun.
    std::vector<std::string> own = with_plan_file(own_arguments(), plan_path);
    if (ProgressBar::stderr_is_terminal() && !a.progress) own.push_back("--progress");
    const auto cmd = mpirun_command(R, own, a.hostfile);
    print_plan(plan, model, spec.schedule);
    // mpirun's arguments up to the program (the hostfile's among them).
    std::string line;
    for (size_t i = 0; i < cmd.size(); ++i) {
      line += (i ? " " : "") + cmd[i];
      if (cmd[i] == own.front()) break;
    }
    std::fprintf(stderr, "launching %d workers: %s ...\n", R, line.c_str());
    std::fflush(stderr);
    std::fflush(stdout);
    std::exit(run_and_wait(cmd));
  }
  if (R == 1 && !under_mpi) {
    print_plan(plan, model, spec.schedule);
    spec.device = apply_run_settings(a);
    LocalTransport t(std::make_shared<LocalHub>(1), 0);
    install_stop_signal_handlers();
    run_pipeline_worker(spec, model, data, t);
    return;
  }
  run_mpi_worker(spec, a, model, data);
}

}  // namespace

void add_run_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("run", "Train a model with a pipeline plan, one process per worker (MPI)");
  auto a = std::make_shared<RunArgs>();
  a->optimizer.lr = std::nanf("");  // train's defaults, which depend on --optimizer
  a->optimizer.momentum = std::nanf("");
  cmd->add_option("--plan", a->plan, "plan.json from `pipedream plan` (or edited by hand), or auto")->required();
  cmd->add_option("--workers", a->workers, "With --plan auto: the number of workers");
  cmd->add_option("--plan-out", a->plan_out, "With --plan auto: where to write the plan")->capture_default_str();
  cmd->add_flag("--straight", a->straight, "With --plan auto: no replication (one worker per stage)");
  cmd->add_option("--memory", a->memory, "With --plan auto: memory per worker the plan must fit (16GB, 16GiB)");
  cmd->add_option("--recompute", a->recompute,
                  "With --plan auto: activation recomputation, as `plan --recompute` (auto, the default with "
                  "--memory; none, the default without; full; every-other)");
  cmd->add_option("--model", a->model, "Zoo model (see `pipedream models`) or a spec .json file");
  cmd->add_option("--model-spec", a->spec_file, "JSON model spec file")->check(CLI::ExistingFile);
  cmd->add_option("--model-options", a->model_options, "Zoo model options, e.g. width=0.5,image_size=32");
  cmd->add_option("--data", a->data,
                  "fashion-mnist | cifar10 | text | synthetic | images:DIR | npy:X.npy,Y.npy | npy:FILE.npz | "
                  "tokens:FILE.bin")
      ->capture_default_str();
  cmd->add_option("--data-dir", a->data_dir, "Dataset folder (cifar10), text file (text), or another fashion-mnist folder");
  cmd->add_option("--data-options", a->data_options,
                  "KEY=VALUE,... for images:, npy:, tokens: (mean=R/G/B, std=R/G/B, val=0.1, augment=1)");
  auto* ep = cmd->add_option("--epochs", a->epochs, "Passes over the training set");
  auto* mb = cmd->add_option("--minibatches", a->minibatches, "Optimizer steps (flush schedules: batches)");
  ep->excludes(mb);
  cmd->add_option("--batch", a->batch,
                  "Minibatch size: the samples of one optimizer step (flush schedules: split into --microbatches); "
                  "default: the batch the plan file records, else 64");
  cmd->add_option("--schedule", a->schedule, schedule_flag_help());
  cmd->add_option("--virtual-stages", a->virtual_stages, virtual_stages_flag_help());
  cmd->add_option("--weights", a->weights, weights_flag_help())->capture_default_str();
  cmd->add_option("--microbatches", a->microbatches,
                  microbatches_flag_help("microbatches --batch is split into (default: the plan's, where it was made "
                                         "for this schedule and batch; else the workers, or the next count that "
                                         "divides --batch)"));
  cmd->add_option("--schedule-file", a->schedule_file,
                  "run this schedule (JSON or CSV from `pipedream schedule --format`, possibly edited) once the "
                  "checker accepts it (a rejected one exits 2 naming its first bad action); it sets the schedule, "
                  "weights, microbatches and steps")
      ->check(CLI::ExistingFile)
      ->excludes(ep)
      ->excludes(mb);
  cmd->add_option("--optimizer", a->optimizer_flag, "sgd | adam | adamw")->capture_default_str();
  cmd->add_option("--lr", a->optimizer.lr, "Learning rate (default: sgd 0.01, adam/adamw 0.001)");
  cmd->add_option("--momentum", a->optimizer.momentum, "SGD momentum (default 0.9)");
  cmd->add_option("--weight-decay", a->optimizer.weight_decay, "SGD/Adam: L2 on the gradient; AdamW: decoupled")
      ->capture_default_str();
  cmd->add_flag("--nesterov", a->optimizer.nesterov, "Nesterov momentum (SGD)");
  cmd->add_option("--beta1", a->optimizer.beta1, "Adam beta1")->capture_default_str();
  cmd->add_option("--beta2", a->optimizer.beta2, "Adam beta2")->capture_default_str();
  cmd->add_option("--lr-schedule", a->lr_schedule, "constant | step | cosine")->capture_default_str();
  cmd->add_option("--warmup", a->lr.warmup_steps, "Linear warm-up steps")->capture_default_str();
  cmd->add_option("--lr-step-size", a->lr.step_size, "step schedule: steps between decays");
  cmd->add_option("--lr-gamma", a->lr.gamma, "step schedule: decay factor")->capture_default_str();
  cmd->add_option("--min-lr", a->lr.min_lr, "cosine schedule: final learning rate")->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of initialisation, sample order and dropout")->capture_default_str();
  cmd->add_option("--threads-per-worker", a->threads, "Compute threads of each worker")->capture_default_str();
  cmd->add_option("--loader-threads", a->loader_threads,
                  "First stage: threads that fetch minibatch inputs ahead of its forwards (default: the cores the "
                  "compute threads leave, 1 to 8; 0: each forward fetches its own)")
      ->check(CLI::Range(0, 64));
  cmd->add_option("--hostfile", a->hostfile,
                  "Started without mpirun: launch the workers on this Open MPI hostfile's hosts, filling each "
                  "host's slots in order")
      ->check(CLI::ExistingFile);
  cmd->add_option("--timeout", a->timeout, "Seconds a worker waits for a peer before the job fails")->capture_default_str();
  cmd->add_option("--clip-grad-norm", a->clip_grad_norm,
                  "Scale each step's gradient down to this global L2 norm when it is larger "
                  "(torch.nn.utils.clip_grad_norm_; the stages exchange their norms): the synchronous schedules, "
                  "or any schedule on a one-stage plan");
  cmd->add_option("--metrics", a->metrics, "Write JSON-lines metrics to this file");
  cmd->add_option("--log-every", a->log_every, "Write a step metrics line every N steps")->capture_default_str();
  cmd->add_option("--save", a->save, "Write the final weights of all stages to one safetensors file");
  cmd->add_option("--trace", a->trace, "Write a Chrome trace of the run (all ranks)");
  auto* svg = cmd->add_option("--svg", a->svg, "Draw the measured pipeline timeline as an SVG (as simulate --svg draws the simulated one)");
  cmd->add_option("--svg-minibatches", a->svg_minibatches, "Minibatches (flush schedules: batches) the --svg timeline spans")
      ->needs(svg);
  cmd->add_option("--checkpoint-dir", a->checkpoint_dir, "Write checkpoints here");
  cmd->add_option("--checkpoint-every", a->checkpoint_every, "Steps between checkpoints (flush schedules: batches); 0: only at the end. A checkpoint does not change "
                  "the result (gpipe, 1f1b-flush, zb-h1: taken between batches; 1f1b-rr with stash or vertical "
                  "weights: with minibatches in flight), except 1f1b-rr with --weights none, whose pipeline drains "
                  "there");
  cmd->add_option("--keep-checkpoints", a->keep_checkpoints,
                  cat("Keep only the newest N checkpoints in --checkpoint-dir, removing older ones after each is "
                      "written (default ", kDefaultKeepCheckpoints, "; 0: keep all)"));
  auto* resume = cmd->add_option("--resume", a->resume,
                  "Continue from a checkpoint (a --checkpoint-dir or one step-N in it); --minibatches / --epochs "
                  "count the whole run, the checkpoint's steps included. The flush schedules (and 1f1b-rr from a "
                  "drained checkpoint) may resume under another plan");
  cmd->add_option("--init", a->init,
                  "Start from these weights, matched by name (as train --init); each worker loads its stage's")
      ->excludes(resume);
  auto* eval_every = cmd->add_option("--eval-every", a->eval_every, "Steps between test evaluations (default: every epoch)");
  auto* eval_batch = cmd->add_option("--eval-batch", a->eval_batch, "Evaluation batch size")->capture_default_str();
  cmd->add_flag("!--no-eval", a->evaluate, "Skip test-set evaluation")->excludes(eval_every)->excludes(eval_batch);
  cmd->add_flag("--reference", a->reference, "Execute every worker's actions in this process (the oracle)");
  cmd->add_flag("--progress", a->progress, "Draw the progress bar even when stderr is not a terminal");
  cmd->add_option("--device", a->device, "cpu | cuda (one GPU per worker: local rank modulo GPUs) | cuda:N")
      ->capture_default_str();
  cmd->add_option("--transport", a->transport,
                  "With --device cuda: staged (GPU tensors through host MPI; bitwise equal to --reference) | "
                  "nccl (device to device; all-reduce not in rank order)")
      ->capture_default_str();
  cmd->add_flag("--deterministic", a->deterministic, "GPU: deterministic cuDNN convolution algorithms only");
  cmd->add_option("--precision", a->precision_flag,
                  "fp32 | bf16 (mixed precision: bf16 operands, activations and messages; FP32 master weights)")
      ->capture_default_str();
  add_allow_tf32_flag(*cmd, a->allow_tf32);
  cmd->callback([a, cmd] {
    RunArgs args = *a;
    args.precision = parse_precision_flag(args.precision_flag);
    refuse_allow_tf32_off_cuda(args.allow_tf32, args.device);
    args.optimizer.kind = parse_optimizer_flag(args.optimizer_flag);
    args.lr.kind = parse_lr_schedule_flag(args.lr_schedule);
    refuse_ignored_optimizer_flags(*cmd, args.optimizer.kind, args.lr.kind);
    refuse_unless_applies(*cmd, "--plan-out", args.plan == "auto",
                          cat("applies to --plan auto only (--plan ", args.plan, " is read, not written)"));
    resolve_optimizer_defaults(args.optimizer);
    if (args.epochs == 0 && args.minibatches == 0) args.epochs = 1;
    run_command(args);
  });
}

}  // namespace pd::cli
