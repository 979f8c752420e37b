#pragma once
// One function per subcommand; each lives in its own cmd_*.cpp and adds a
// CLI11 subcommand whose callback does the work. Errors are thrown
// (pd::UserError -> exit 2, anything else -> exit 1) and reported by main.
#include <CLI/CLI.hpp>

namespace pd {
struct OptimizerConfig;
}

namespace pd::cli {

void add_models_command(CLI::App& app);
void add_train_command(CLI::App& app);
void add_profile_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_simulate_command(CLI::App& app);
void add_schedule_command(CLI::App& app);
void add_run_command(CLI::App& app);
void add_bench_comm_command(CLI::App& app);
void add_export_command(CLI::App& app);
void add_evaluate_command(CLI::App& app);
void add_predict_command(CLI::App& app);

// train's and run's optimizer defaults, which depend on the optimizer: SGD
// lr 0.01 momentum 0.9, Adam/AdamW lr 0.001 no momentum (they use beta1).
// NaN marks a value the user did not give.
void resolve_optimizer_defaults(pd::OptimizerConfig& c);

// Text printed by `pipedream --version`: version and compiled backends.
std::string version_text();

}  // namespace pd::cli
