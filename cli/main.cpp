// The `pipedream` binary: profile, plan, simulate, schedule, train, run, evaluate, predict, export.
#include <functional>
#include <string>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "cli/run_app.h"
#include "onnx/import.h"

int main(int argc, char** argv) {
  pd::cli::prepare_process(argc, argv, {"train", "profile", "run", "evaluate", "predict"});
  pd::onnx::register_onnx_model_loader();  // --model file.onnx
  CLI::App app{"PipeDream in C++: pipeline-parallel training"};
  app.require_subcommand(1);
  // Lazy: the text loads the CUDA plugin, which other commands must not pay for.
  app.set_version_flag("--version", std::function<std::string()>([] { return pd::cli::version_text(); }));
  pd::cli::add_models_command(app);
  pd::cli::add_train_command(app);
  pd::cli::add_profile_command(app);
  pd::cli::add_plan_command(app);
  pd::cli::add_simulate_command(app);
  pd::cli::add_schedule_command(app);
  pd::cli::add_run_command(app);
  pd::cli::add_bench_comm_command(app);
  pd::cli::add_evaluate_command(app);
  pd::cli::add_predict_command(app);
  pd::cli::add_export_command(app);
  // Here rather than in each command: every option of every command checked
  // by one table of rules (cli/option_checks.cpp).
  pd::cli::check_option_values(app);
  pd::cli::reject_options_reference_ignores(*app.get_subcommand("run"));
  return pd::cli::run_app(app, argc, argv);
}
