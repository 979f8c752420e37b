// `pipedream schedule`: print one worker's action list (for debugging runs),
// or every worker's as data (--format json|csv) to edit and replay with
// `simulate --schedule-file`.
#include <iostream>
#include <memory>
#include <sstream>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "planner/plan.h"
#include "runtime/schedule/check.h"
#include "runtime/schedule/schedule.h"
#include "runtime/schedule/schedule_file.h"

namespace pd::cli {

namespace {

struct ScheduleArgs {
  std::string plan, schedule, weights = "stash", format, output;
  int worker = -1;
  int64_t minibatches = 0, limit = 0;
  int microbatches = 0, virtual_stages = 1;
  bool check = false;
};

void write_all_workers(const Schedule& schedule, const ScheduleArgs& a) {
  const ScheduleFile file = export_schedule(schedule);
  std::ostringstream out;
  if (a.format == "json") write_schedule_json(out, file);
  else write_schedule_csv(out, file);
  if (a.output.empty()) std::cout << out.str();
  else write_file_atomically(a.output, out.str());
}

void run_schedule(const ScheduleArgs& a) {
  Plan plan = read_plan(a.plan);
  ScheduleOptions o;
  o.kind = parse_schedule_kind(a.schedule.empty() ? plan.schedule : a.schedule);
  o.policy = parse_weight_policy(a.weights);
  o.virtual_stages = a.virtual_stages;
  int workers = 0;
  for (const auto& s : plan.stages) workers += s.replicas;
  // Enough minibatches to show warm-up, steady state and drain.
  o.minibatches = a.minibatches > 0 ? a.minibatches : 2 * steps_per_period(o.kind, workers);
  o.microbatches = microbatches_for(o.kind, a.microbatches, workers, [](int) { return 4; });
  if (a.minibatches > 0 || a.microbatches > 0)  // the defaults are sized to the plan
    check_schedule_length("schedule", o.minibatches, o.microbatches, workers, kMaxPrintedPasses);
  Schedule schedule(plan, o);
  check_plan_topology(plan, schedule.workers(), a.plan);
  if (!a.format.empty()) {
    write_all_workers(schedule, a);
  } else {
    if (a.worker < 0) throw UserError("--worker is required (or --format json|csv for every worker's actions)");
    std::cout << format_worker_schedule(schedule, a.worker, a.limit);
  }
  if (a.check) {
    auto violations = check_schedule(schedule);
    // Not into the data on stdout.
    std::ostream& note = !a.format.empty() && a.output.empty() ? std::cerr : std::cout;
    if (violations.empty()) {
      note << "# check: all " << schedule.workers() << " workers' lists are consistent and deadlock-free\n";
    } else {
      std::string msg = "schedule check failed:";
      for (const auto& v : violations) msg += "\n  " + v;
      throw RuntimeFailure(msg);
    }
  }
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto args = std::make_shared<ScheduleArgs>();
  auto* cmd = app.add_subcommand("schedule", "Print one worker's action list for a plan, or every worker's as JSON or CSV");
  cmd->add_option("--plan", args->plan, "plan.json from `pipedream plan`")->required()->check(CLI::ExistingFile);
  auto* worker = cmd->add_option("--worker", args->worker, "rank whose actions to print");
  auto* format = cmd->add_option("--format", args->format,
                                 "write every worker's actions as data: json | csv (runtime/schedule/README.md)")
                     ->check(CLI::IsMember({"json", "csv"}))
                     ->excludes(worker);
  cmd->add_option("-o,--output", args->output, "with --format: write to this file instead of stdout")->needs(format);
  cmd->add_option("--schedule", args->schedule, schedule_flag_help());
  cmd->add_option("--virtual-stages", args->virtual_stages, virtual_stages_flag_help());
  cmd->add_option("--weights", args->weights, weights_flag_help());
  cmd->add_option("--minibatches", args->minibatches,
                  "minibatches (batches for flush schedules); default 2 x workers + 2 (flush: 2)");
  cmd->add_option("--microbatches", args->microbatches, microbatches_flag_help("microbatches per batch (default 4)"));
  cmd->add_option("--limit", args->limit, "print at most this many actions")->excludes(format);
  cmd->add_flag("--check", args->check, "also check every worker's list (matching messages, no deadlock, versions)");
  cmd->callback([args] { run_schedule(*args); });
}

}  // namespace pd::cli
