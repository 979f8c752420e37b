#pragma once
// One function per subcommand; each lives in its own cmd_*.cpp and adds a
// CLI11 subcommand whose callback does the work. Errors are thrown
// (pd::UserError -> exit 2, anything else -> exit 1) and reported by main.
#include <CLI/CLI.hpp>

namespace pd::cli {

void add_models_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_bench_comm_command(CLI::App& app);

// Text printed by `pipedream --version`: version and compiled backends.
std::string version_text();

}  // namespace pd::cli
