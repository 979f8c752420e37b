// pipedream-bench: core | planner | simulate | runtime. JSON lines on stdout.
#include "bench/suites.h"
#include "cli/run_app.h"
#include "onnx/import.h"

int main(int argc, char** argv) {
  pd::cli::prepare_process(argc, argv, {"core", "runtime"});
  pd::onnx::register_onnx_model_loader();  // core --model file.onnx, as the pipedream binary
  CLI::App app{"pipedream benchmarks (JSON lines on stdout)"};
  app.require_subcommand(1);
  pd::bench::add_core_suite(app);
  pd::bench::add_planner_suite(app);
  pd::bench::add_simulate_suite(app);
  pd::bench::add_runtime_suite(app);
  return pd::cli::run_app(app, argc, argv);
}
