// `pipedream plan`: profile + topology -> the optimal pipeline (plan.json)
// and a human summary.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <iostream>
#include <optional>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/text.h"
#include "planner/planner.h"
#include "runtime/simulator/plan_search.h"
#include "runtime/schedule/schedule.h"
#include "runtime/simulator/schedule_search.h"

namespace pd::cli {
namespace {

struct PlanArgs {
  std::string profile, topology, output, cost_model = "paper", memory, schedule = "1f1b-rr", recompute;
  int workers = -1;
  double bandwidth = -1;
  bool straight = false, fewer = false, closed_form = false;
  std::optional<double> compression;
  std::vector<std::string> baselines;
  int max_states = 20000;
};

std::string rank_list(const std::vector<int>& ranks) {
  // Consecutive ranks print as a range.
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    out += (out.empty() ? "" : ",") + std::to_string(ranks[i]) + (j > i ? "-" + std::to_string(ranks[j]) : "");
    i = j + 1;
  }
  return out;
}

std::string layer_summary(const PlanStage& s) {
  std::string names;
  if (!s.layer_names.empty()) {
    names = s.layer_names.front();
    if (names.size() > 32) names = names.substr(0, 29) + "...";
    if (s.layer_names.size() > 1) {
      std::string last = s.layer_names.back();
      if (last.size() > 32) last = last.substr(0, 29) + "...";
      names += " .. " + last;
    }
  }
  return cat("layers ", s.first_layer, "-", s.last_layer, " (",
             counted(static_cast<long long>(s.layer_names.size()), "node", "nodes"), ": ", names, ")");
}

// "2.30x over data parallelism (28.258 ms)", or that it does not fit, or
// that the cost model did not compute it.
std::string baseline_text(const char* name, double seconds, double speedup) {
  if (std::isnan(seconds)) return cat(name, ": does not fit in worker memory");
  if (!(seconds > 0) || !(speedup > 0)) return cat(name, ": not computed by this cost model");
  char text[160];
  std::snprintf(text, sizeof text, "%.2fx over %s (%s)", speedup, name, seconds_text(seconds).c_str());
  return text;
}

// The replayed candidates, the chosen one marked.
void print_candidates(const PlanSearch& search) {
  std::printf("candidates (closed form, then replayed by the simulator):\n");
  for (size_t i = 0; i < search.candidates.size(); ++i) {
    const PlanCandidate& c = search.candidates[i];
    std::printf("  %c %-14s %-24s %12s %12s\n", i == search.chosen ? '*' : ' ', c.family.c_str(), c.config.c_str(),
                seconds_text(c.closed_form_s).c_str(), seconds_text(c.replayed_s).c_str());
  }
}

// One stage's times, those the cost model computed: the pipedream cost
// model (the released optimizer) prices the pipeline as a whole and leaves
// the stage time and transfers at 0.
std::string stage_times_text(const PlanStage& s) {
  std::string text = cat("compute ", seconds_text(s.compute_s), " (fwd ", seconds_text(s.forward_s), ", bwd ",
                         seconds_text(s.backward_s), ")");
  if (s.sync_s > 0) text += cat(", sync ", seconds_text(s.sync_s));
  if (s.transfer_s > 0) text += cat(", transfer ", seconds_text(s.transfer_s));
  if (s.time_s > 0) text += cat(", stage time ", seconds_text(s.time_s));
  return text;
}

void print_summary(const Plan& plan, const Topology& topology) {
  // PipeDream's graph.txt records no batch size.
  const std::string batch = plan.profile.batch_size > 0 ? cat("batch ", plan.profile.batch_size)
                                                        : std::string("batch size not recorded");
  std::printf("Plan for %s (%s, %s) on %d workers", plan.profile.model.c_str(), plan.profile.path.c_str(),
              batch.c_str(), topology.total_workers());
  for (size_t l = 0; l < topology.levels.size(); ++l)
    std::printf("%s%d x %.4g GB/s", l ? " | " : " [", topology.levels[l].count, topology.levels[l].bandwidth_GBps);
  std::printf("], cost model %s, states %s\n", to_string(plan.cost_model),
              plan.state_space ? to_string(*plan.state_space) : "");
  for (const auto& s : plan.stages) {
    std::printf("  stage %d%s: %s\n", s.index, s.index == plan.bottleneck_stage ? " (bottleneck)" : "",
                layer_summary(s).c_str());
    std::printf("    replicas %d on ranks %s; %s\n", s.replicas, rank_list(s.ranks).c_str(), stage_times_text(s).c_str());
    const std::string held = plan.schedule == default_schedule_kind()->name()
                                 ? counted(s.in_flight, "minibatch", "minibatches") + " in flight"
                                 : cat(plan.schedule, ", ", plan.microbatches, " microbatches");
    std::printf("    memory %s per worker (%s), sends %s per minibatch\n", bytes_text(double(s.memory_bytes)).c_str(),
                held.c_str(), bytes_text(double(s.output_bytes)).c_str());
    if (!s.recompute_layers.empty())
      std::printf("    recomputes %s before their backward (+%s per minibatch)\n",
                  counted(static_cast<long long>(s.recompute_layers.size()), "layer", "layers").c_str(),
                  seconds_text(s.recompute_s).c_str());
  }
  for (const PlanTie& t : plan.ties)  // planner/plan_ties.h
    std::printf("  tied %s (%s) in stages %s: its gradient exchanged in %s per optimizer step (in the prediction)\n",
                t.parameter.c_str(), bytes_text(double(t.bytes)).c_str(), rank_list(t.stages).c_str(),
                seconds_text(t.exchange_s).c_str());
  std::printf("config %s, NOAM %d\n", plan.config.c_str(), plan.noam);
  std::printf("predicted time per minibatch %s", seconds_text(plan.time_per_minibatch_s).c_str());
  // The bound is the closed-form optimum's (0: none on these workers).
  if (plan.predicted_by == PredictedBy::replay && plan.closed_form_bound_s > 0)
    std::printf(" (replayed; closed form %s, no plan's closed form below %s)", seconds_text(plan.closed_form_s).c_str(),
                seconds_text(plan.closed_form_bound_s).c_str());
  else if (plan.predicted_by == PredictedBy::replay && plan.closed_form_s > 0)
    std::printf(" (replayed; closed form %s)", seconds_text(plan.closed_form_s).c_str());
  if (plan.throughput_samples_per_s > 0) std::printf(", %.1f samples/s", plan.throughput_samples_per_s);
  else if (plan.profile.batch_size <= 0)
    std::printf(" (samples/s unknown: the profile records no batch size; `simulate --batch-size N` gives them)");
  std::printf("\n");
  bool per_stage = true;
  for (const auto& s : plan.stages) per_stage = per_stage && s.time_s > 0;
  if (!per_stage)
    std::printf("(the %s cost model prices the pipeline as a whole: it gives no stage time per stage, and "
                "transfers only where shown)\n", to_string(plan.cost_model));
  std::printf("%s, %s\n", baseline_text("one worker", plan.single_worker_s, plan.speedup_vs_single).c_str(),
              baseline_text("data parallelism", plan.data_parallel_s, plan.speedup_vs_data_parallel).c_str());
  if (plan.workers() < topology.total_workers())
    std::printf("note: the plan uses %d of the %d workers (%d idle): no plan on more of them replays faster\n",
                plan.workers(), topology.total_workers(), topology.total_workers() - plan.workers());
}

// A word as a POSIX shell reads it back: quoted when it holds anything
// beyond letters, digits and -_./:=,+
std::string shell_word(const std::string& w) {
  const bool plain = !w.empty() && std::all_of(w.begin(), w.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || std::strchr("-_./:=,+", c);
  });
  if (plain) return w;
  std::string out = "'";
  for (char c : w) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

std::string number_text(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.15g", v);
  return text;
}

// This `plan` command again, with another --memory or --workers (and
// --recompute: `recompute`, else as given): what a failure recommends,
// ready to paste.
std::string plan_command(const PlanArgs& a, uint64_t memory, int workers, const std::string& recompute = "") {
  std::string c = "pipedream plan --profile " + shell_word(a.profile);
  if (!a.topology.empty()) c += " --topology " + shell_word(a.topology);
  else c += cat(" --workers ", workers > 0 ? workers : a.workers, " --bandwidth ", number_text(a.bandwidth));
  if (a.cost_model != "paper") c += " --cost-model " + shell_word(a.cost_model);
  if (a.straight) c += " --straight";
  if (a.fewer) c += " --fewer-workers";
  if (a.schedule != "1f1b-rr") c += " --schedule " + shell_word(a.schedule);
  if (memory > 0) c += cat(" --memory ", memory);
  else if (!a.memory.empty()) c += " --memory " + shell_word(a.memory);
  if (!recompute.empty() || !a.recompute.empty())
    c += " --recompute " + shell_word(recompute.empty() ? a.recompute : recompute);
  if (a.compression) c += " --activation-compression-ratio " + number_text(*a.compression);
  if (a.max_states != 20000) c += cat(" --max-antichain-states ", a.max_states);
  if (a.closed_form) c += " --closed-form";
  for (const std::string& b : a.baselines) c += " --baseline " + shell_word(b);
  if (!a.output.empty()) c += " -o " + shell_word(a.output);
  return c;
}

// A plan that does not fit, with the commands that do.
[[noreturn]] void explain_with_commands(const PlanArgs& a, const std::string& why, uint64_t memory, int workers) {
  std::string text = why;
  if (memory > 0) text += cat("\n  fits: ", plan_command(a, memory, 0));
  if (workers > 0 && a.topology.empty()) text += cat("\n  fits: ", plan_command(a, 0, workers));
  throw UserError(text);
}

// The flags that build the profiled model again: those `profile` recorded
// (--model or --model-spec, and --model-options), else the profile's model
// name (older profiles, PipeDream's graph.txt).
std::string model_flags(const Profile& p) {
  if (p.model_argument.empty() && p.model_spec_file.empty()) return "--model " + shell_word(p.model);
  std::string flags = p.model_argument.empty() ? "--model-spec " + shell_word(p.model_spec_file)
                                               : "--model " + shell_word(p.model_argument);
  if (!p.model_options.empty()) flags += " --model-options " + shell_word(p.model_options);
  return flags;
}

// The commands that run and replay --schedule auto's choice, as pasted
// (the plan file records the schedule, microbatches and batch, which the
// run command repeats so that it reads on its own).
void print_recommendation(const PlanArgs& a, const Plan& plan, const Profile& profile, const ScheduleCandidate& c,
                          const std::string& measured_profile) {
  const std::string file = a.output.empty() ? std::string("plan.json") : a.output;
  const std::string flags = cat("--schedule ", to_string(c.family), " --microbatches ", c.schedule.microbatches,
                                c.schedule.virtual_stages > 1 ? cat(" --virtual-stages ", c.schedule.virtual_stages)
                                                              : std::string());
  if (a.output.empty()) std::printf("(give -o plan.json to write the plan the commands below read)\n");
  const int batch = plan.profile.batch_size, m = c.schedule.microbatches;
  if (batch > 0)
    std::printf("run it (batches of %d: %d microbatches of %d; plan.json records these flags; add --data and a "
                "length):\n  pipedream run --plan %s %s --batch %d %s\n",
                batch, m, batch / m, shell_word(file).c_str(), model_flags(profile).c_str(), batch, flags.c_str());
  else  // a PipeDream graph.txt records no batch
    std::printf("run it (the profile records no batch: give --batch, a multiple of %d):\n  pipedream run --plan %s "
                "%s %s\n", m, shell_word(file).c_str(), model_flags(profile).c_str(), flags.c_str());
  // simulate prices microbatches as the search did only with the same profile.
  std::printf("replay this prediction:\n  pipedream simulate --plan %s %s%s --minibatches %lld\n", shell_word(file).c_str(),
              flags.c_str(), measured_profile.empty() ? "" : cat(" --profile ", shell_word(measured_profile)).c_str(),
              static_cast<long long>(c.schedule.minibatches));
}

// --schedule auto found nothing under the limit: the least memory with
// which it chooses a family, with recomputation and without, each found by
// whole searches (schedule_search.h), and the commands that use them.
[[noreturn]] void explain_no_family_fits(const PlanArgs& a, const Profile& profile, const Topology& topology,
                                         const PlannerOptions& options, const ScheduleSearch& search) {
  // A start that fits either way: the least any family's plan ignoring memory needs.
  double least = 0;
  for (const ScheduleCandidate& c : search.families)
    if (c.least_memory_bytes > 0) least = least > 0 ? std::min(least, c.least_memory_bytes) : c.least_memory_bytes;
  uint64_t rr_fits = 0;
  int workers = 0;
  try {
    std::rethrow_exception(search.families.front().failure);
  } catch (const PlanDoesNotFit& e) {  // 1f1b-rr's own search for what fits
    rr_fits = e.memory_that_fits;
    workers = e.workers_that_fit;
  } catch (...) {
  }
  const uint64_t limit = options.memory_bytes ? options.memory_bytes : topology.worker_memory_bytes;
  const uint64_t start = least > 0 ? uint64_t(std::ceil(least)) : std::max<uint64_t>(rr_fits, 2 * limit);
  const RecomputeMode with_mode =
      options.recompute == RecomputeMode::none ? RecomputeMode::automatic : options.recompute;
  std::string text = cat("no schedule family fits the memory limit; with ", topology.total_workers(),
                         " workers the least memory per worker that fits is");
  std::string commands;
  for (const RecomputeMode mode : {with_mode, RecomputeMode::none}) {
    PlannerOptions o = options;
    o.recompute = mode;
    const uint64_t from = mode == options.recompute && rr_fits > 0 ? std::min(start, rr_fits) : start;
    // The limit is known not to fit only the way the user asked.
    const uint64_t below = mode == options.recompute ? limit : 1;
    const std::optional<MemoryNeed> need = least_memory_any_schedule(profile, topology, o, below, from);
    text += mode == RecomputeMode::none ? std::string("; without recomputation, ")
                                        : cat(", with recomputation (", to_string(mode), "), ");
    text += need ? cat(bytes_text(double(need->fits)), " (--memory ", need->fits, " fits, ", need->more_than,
                       " does not)")
                 : cat("no size up to ", bytes_text(64.0 * double(std::max(from, below + 1))), " fits");
    if (need) commands += cat("\n  fits: ", plan_command(a, need->fits, 0, to_string(mode)));
  }
  if (workers > 0 && a.topology.empty()) commands += cat("\n  fits: ", plan_command(a, 0, workers));
  throw UserError(text + commands);
}

// --schedule auto: every family's best side by side, the fastest that fits
// chosen; its plan is the one written.
Plan choose_schedule(const PlanArgs& a, const Profile& profile, const Topology& topology, const PlannerOptions& options) {
  const ScheduleSearch search = search_schedules(profile, topology, options);
  std::printf("schedule families (each its best plan and microbatch count, replayed; memory: the fullest worker):\n");
  std::printf("  %-18s %-22s %12s %14s %14s %12s\n", "family", "config", "microbatches", "time/batch", "samples/s",
              "memory");
  for (size_t i = 0; i < search.families.size(); ++i) {
    const ScheduleCandidate& c = search.families[i];
    const bool chosen = static_cast<int>(i) == search.chosen;
    if (!c.fits && c.plan.stages.empty()) {
      std::printf("  %-18s not considered: %s\n", to_string(c.family).c_str(), c.note.c_str());
      continue;
    }
    const std::string micro = c.replayed ? std::to_string(c.schedule.microbatches) : "-";
    std::printf("  %-18s %-22s %12s %14s %14.1f %12s%s\n", to_string(c.family).c_str(), c.plan.config.c_str(),
                micro.c_str(), seconds_text(c.time_per_batch_s).c_str(), c.samples_per_s,
                bytes_text(c.peak_memory_bytes).c_str(),
                chosen ? "  <- chosen" : c.fits ? "" : "  does not fit");
  }
  const std::vector<int> sizes = profile.measured_microbatch_sizes();
  if (sizes.empty()) {
    std::printf("(a microbatch's compute is 1/M of the minibatch's here, which undercounts small microbatches; "
                "`pipedream profile --microbatches M,...` measures it)\n");
  } else {
    std::string list;
    for (int b : sizes) list += cat(list.empty() ? "" : ", ", b);
    std::printf("(microbatch compute measured at batch %s, the profile's at_batch times; 1/M of the minibatch's for "
                "other sizes)\n", list.c_str());
  }
  if (search.chosen < 0) explain_no_family_fits(a, profile, topology, options, search);
  const ScheduleCandidate& c = search.families[static_cast<size_t>(search.chosen)];
  Plan plan = c.plan;
  plan.schedule = c.family->name();
  plan.throughput_samples_per_s = c.samples_per_s;
  if (c.family != default_schedule_kind()) {
    // The baselines as 1f1b-rr's search replayed them (the straight plan's are closed forms).
    const ScheduleCandidate& rr = search.families.front();
    plan.single_worker_s = rr.plan.stages.empty() ? 0 : rr.plan.single_worker_s;
    plan.data_parallel_s = rr.plan.stages.empty() ? 0 : rr.plan.data_parallel_s;
    set_predicted_time(plan, c.time_per_batch_s, PredictedBy::replay);
    plan.closed_form_s = plan.closed_form_bound_s = 0;  // the closed forms are 1f1b-rr's
    plan.microbatches = c.schedule.microbatches;
    plan.virtual_stages = c.schedule.virtual_stages;
    plan.batch = plan.profile.batch_size;
    // The memory printed and compared by `run` is this schedule's: that of
    // the worker stage k runs on, as the schedule places it (a V puts
    // stages w and 2p - 1 - w on worker w).
    const Schedule placed(c.plan, c.schedule);
    for (PlanStage& st : plan.stages) {
      const size_t worker = static_cast<size_t>(placed.place(st.index).worker);
      st.memory_bytes = worker < c.worker_memory_bytes.size() ? uint64_t(c.worker_memory_bytes[worker]) : 0;
      st.in_flight = 0;
    }
    print_recommendation(a, plan, profile, c, sizes.empty() ? "" : profile.source_path);
  } else {
    plan.batch = plan.profile.batch_size;
  }
  return plan;
}

void run_plan(const PlanArgs& a) {
  check_output_file("-o", a.output);
  Topology topology;
  if (!a.topology.empty()) {
    if (a.workers >= 0 || a.bandwidth >= 0)
      throw UserError("give either --topology FILE or --workers N --bandwidth GBps, not both");
    topology = read_topology(a.topology);
  } else {
    if (a.workers < 0 || a.bandwidth < 0)
      throw UserError("give --workers N and --bandwidth GBps (10^9 bytes/s), or --topology FILE");
    topology = flat_topology(a.workers, a.bandwidth);
  }
  PlannerOptions options;
  if (std::optional<CostModel> model = parse_cost_model(a.cost_model)) options.cost_model = *model;
  else throw UserError(cat("--cost-model must be paper or pipedream, got '", a.cost_model, "'"));
  options.straight = a.straight;
  options.fewer_workers = a.fewer;
  if (!a.memory.empty()) options.memory_bytes = parse_size(a.memory);
  options.activation_compression_ratio = a.compression;
  options.max_antichain_states = a.max_states;
  options.recompute = recompute_mode_option(a.recompute, options.memory_bytes > 0 || topology.worker_memory_bytes > 0);
  if (options.cost_model == CostModel::pipedream) {
    if (!a.recompute.empty() && options.recompute != RecomputeMode::none)
      throw UserError("--recompute needs the paper cost model (the released optimizer has no recomputation)");
    options.recompute = RecomputeMode::none;
  }
  Profile profile = read_profile(a.profile);
  // The precision is the profile's: a bf16 profile's sizes are bf16's.
  if (profile.precision == Precision::BF16)
    std::fprintf(stderr, "%s was measured with --precision bf16: activations and messages planned at 2 bytes an element; "
                "run the plan with --precision bf16\n", a.profile.c_str());
  Plan plan;
  try {
    if (a.schedule == "auto") {
      if (a.closed_form) throw UserError("--schedule auto replays every candidate: drop --closed-form");
      plan = choose_schedule(a, profile, topology, options);
    } else if (a.schedule != default_schedule_kind()->name()) {
      throw UserError(cat("--schedule must be ", default_schedule_kind()->name(), " (default) or auto, got '",
                          a.schedule, "'"));
    } else if (a.closed_form) {
      plan = plan_pipeline(profile, topology, options);
    } else {
      PlanSearch search = search_plan(profile, topology, options);
      plan = search.plan;
      if (options.cost_model == CostModel::paper) print_candidates(search);
    }
  } catch (const PlanDoesNotFit& e) {
    explain_with_commands(a, e.what(), e.memory_that_fits, e.workers_that_fit);
  }
  nlohmann::json j = plan_to_json(plan);
  print_summary(plan, topology);
  if (options.cost_model == CostModel::pipedream && !a.closed_form)
    std::printf("(no candidate table: it compares the paper cost model's candidates; the pipedream cost model's "
                "optimum is the released optimizer's, taken as it is)\n");
  for (const auto& b : a.baselines) {
    if (b == "dp") {
      if (std::isnan(plan.data_parallel_s))
        std::printf("baseline dp: does not fit in worker memory on %d replicas\n", topology.total_workers());
      else
        std::printf("baseline dp: %s per minibatch on %d replicas (plan is %.2fx faster)\n",
                    seconds_text(plan.data_parallel_s).c_str(), topology.total_workers(), plan.speedup_vs_data_parallel);
    } else if (b == "straight" || b == "equal") {
      Plan other;
      if (b == "straight") {
        PlannerOptions straight = options;
        straight.straight = true;
        straight.fewer_workers = true;
        other = plan_pipeline(profile, topology, straight);
      } else {
        other = plan_equal_split(profile, topology);
      }
      std::printf("baseline %s: config %s, %s per minibatch (plan is %.2fx faster)\n", b.c_str(),
                  other.config.c_str(), seconds_text(other.time_per_minibatch_s).c_str(),
                  other.time_per_minibatch_s / plan.time_per_minibatch_s);
      j["baselines"][b + "_s"] = other.time_per_minibatch_s;
      j["baselines"][b + "_config"] = other.config;
    } else {
      throw UserError(cat("--baseline must be dp, straight or equal, got '", b, "'"));
    }
  }
  if (!a.output.empty()) {
    write_file_atomically(a.output, j.dump(2) + "\n");
    std::printf("wrote %s\n", a.output.c_str());
  }
}

}  // namespace

void add_plan_command(CLI::App& app) {
  auto args = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Partition a profiled model into replicated pipeline stages");
  cmd->add_option("--profile", args->profile, "profile.json or PipeDream graph.txt")->required();
  cmd->add_option("--workers", args->workers, "number of workers (one-level topology)");
  cmd->add_option("--bandwidth", args->bandwidth, "bandwidth between workers in GB/s (10^9 bytes/s)");
  cmd->add_option("--topology", args->topology, "topology JSON (levels innermost first)");
  cmd->add_option("--cost-model", args->cost_model, "paper (default) or pipedream (the released optimizer)");
  cmd->add_flag("--straight", args->straight, "no replication: one worker per stage");
  cmd->add_option("--schedule", args->schedule,
                  cat(default_schedule_kind()->name(), " (default: the planner's pipeline with replication) | auto (the "
                      "best of ", searched_schedule_names(" and "),
                      " with the microbatch count, under --memory)"));
  cmd->add_option("--memory", args->memory, "memory per worker (4000000000, 16GB, 16GiB)");
  cmd->add_option("--recompute", args->recompute,
                  "activation recomputation: auto (the default with a memory limit: per stage, the fastest layers to "
                  "recompute that make it fit), none (the default without), full, every-other");
  cmd->add_flag("--fewer-workers", args->fewer, "allow plans that leave workers idle");
  cmd->add_option("--activation-compression-ratio", args->compression, "PipeDream's activation compression ratio");
  cmd->add_option("--baseline", args->baselines, "also plan a comparison point: dp, straight, equal")->take_all();
  cmd->add_option("--max-antichain-states", args->max_states, "DAGs: above this many states use topological prefixes");
  cmd->add_flag("--closed-form", args->closed_form,
                "skip the replay: the closed-form optimum, its prediction unchecked by the simulator");
  cmd->add_option("-o,--output", args->output, "write plan.json here");
  cmd->callback([args] { run_plan(*args); });
}

}  // namespace pd::cli
