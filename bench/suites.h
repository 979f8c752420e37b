#pragma once
// Each benchmark suite adds one CLI11 subcommand to pipedream-bench and
// prints one JSON object per line on stdout.
#include <CLI/CLI.hpp>

namespace pd::bench {
void add_core_suite(CLI::App& app);
void add_planner_suite(CLI::App& app);
void add_simulate_suite(CLI::App& app);
void add_runtime_suite(CLI::App& app);
}  // namespace pd::bench
