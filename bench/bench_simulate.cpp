// pipedream-bench simulate: how fast the simulator replays large plans, and
// that its memory grows with workers, not with minibatches x workers.
// One JSON object per case on stdout.
#include <sys/resource.h>

#include <chrono>
#include <iostream>
#include <memory>
#include <numeric>

#include <nlohmann/json.hpp>

#include "bench/suites.h"
#include "core/error.h"
#include "planner/plan.h"
#include "runtime/simulator/simulator.h"

namespace pd::bench {

namespace {

// Stages with the given replica counts on consecutive ranks of a flat
// 1.25 GB/s topology; stage s takes slightly different times so that the
// replay is not trivially periodic.
Plan synthetic_plan(const std::vector<int>& replicas) {
  Plan p;
  int workers = std::accumulate(replicas.begin(), replicas.end(), 0);
  p.topology = flat_topology(workers, 1.25);
  p.profile.batch_size = 64;
  int rank = 0;
  for (size_t s = 0; s < replicas.size(); ++s) {
    PlanStage st;
    st.index = static_cast<int>(s);
    st.first_layer = st.last_layer = static_cast<int>(s);
    st.replicas = replicas[s];
    for (int k = 0; k < replicas[s]; ++k) st.ranks.push_back(rank++);
    double compute = 0.010 * replicas[s] * (1.0 + 0.1 * double(s % 3));
    st.forward_s = compute / 3;
    st.backward_s = 2 * compute / 3;
    st.output_bytes = 1'000'000;
    st.parameter_bytes = 4'000'000;
    p.stages.push_back(st);
  }
  return p;
}

double cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_utime.tv_sec + u.ru_stime.tv_sec) + 1e-6 * double(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

long peak_rss_kib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss;
}

void run_case(const std::string& only, const std::string& name, const std::vector<int>& replicas, const char* schedule,
              int64_t minibatches, int microbatches) {
  if (!only.empty() && name.find(only) == std::string::npos) return;
  Plan plan = synthetic_plan(replicas);
  SimulationOptions opt;
  opt.schedule.kind = parse_schedule_kind(schedule);
  opt.schedule.minibatches = minibatches;
  opt.schedule.microbatches = microbatches;
  auto t0 = std::chrono::steady_clock::now();
  double cpu0 = cpu_seconds();
  SimulationReport rep = simulate(plan, opt);
  double cpu = cpu_seconds() - cpu0;
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int64_t actions = 0;  // compute actions replayed
  for (const auto& st : plan.stages) actions += 2 * minibatches * microbatches;
  nlohmann::json j = {{"suite", "simulate"},
                      {"case", name},
                      {"workers", plan.topology.total_workers()},
                      {"stages", plan.stages.size()},
                      {"schedule", schedule},
                      {"minibatches", minibatches},
                      {"microbatches", microbatches},
                      {"compute_actions", actions},
                      {"wall_s", wall},
                      {"cpu_s", cpu},  // wall_s includes waiting for a busy machine
                      {"compute_actions_per_s", double(actions) / wall},
                      {"peak_rss_mib_after", double(peak_rss_kib()) / 1024.0},
                      {"simulated_time_per_minibatch_s", rep.time_per_minibatch_s}};
  std::cout << j.dump() << std::endl;
}

}  // namespace

void add_simulate_suite(CLI::App& app) {
  auto quick = std::make_shared<bool>(false);
  auto only = std::make_shared<std::string>();
  auto* cmd = app.add_subcommand("simulate", "simulator speed and memory on 1,024-worker plans");
  cmd->add_flag("--quick", *quick, "only the small cases");
  cmd->add_option("--case", *only, "only the cases whose name contains this text (e.g. 'x 10000', 'gpipe')");
  cmd->callback([quick, only] {
    const std::vector<int> straight(1024, 1);
    const std::vector<int> wide(16, 64);
    std::vector<int> halving;  // 512-256-...-2-1-1
    for (int r = 512; r >= 1; r /= 2) halving.push_back(r);
    halving.push_back(1);
    // Small minibatch counts first: peak RSS only grows, so a flat RSS from
    // 1,000 to 10,000 minibatches shows memory does not scale with them.
    run_case(*only, "1024 stages x 1000 minibatches", straight, "1f1b-rr", 1000, 1);
    if (*quick) return;
    run_case(*only, "1024 stages x 10000 minibatches", straight, "1f1b-rr", 10000, 1);
    run_case(*only, "16 stages x 64 replicas x 10000 minibatches", wide, "1f1b-rr", 10000, 1);
    run_case(*only, "512-256-...-1-1 x 10000 minibatches", halving, "1f1b-rr", 10000, 1);
    run_case(*only, "1024 stages gpipe 1000 batches x 8 microbatches", straight, "gpipe", 1000, 8);
    run_case(*only, "1024 stages 1f1b-flush 1000 batches x 8 microbatches", straight, "1f1b-flush", 1000, 8);
  });
}

}  // namespace pd::bench
