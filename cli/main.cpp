// The `pipedream` binary: profile, plan, simulate, schedule, train, run.
#include <iostream>

#include "cli/commands.h"
#include "core/cpu/openmp_policy.h"
#include "core/error.h"

int main(int argc, char** argv) {
  // Before MPI or OpenMP start: sleeping OpenMP waits (see openmp_policy.h).
  pd::cpu::ensure_passive_openmp_wait(argv);
  CLI::App app{"PipeDream in C++: pipeline-parallel training"};
  app.require_subcommand(1);
  app.set_version_flag("--version", pd::cli::version_text());
  pd::cli::add_models_command(app);
  pd::cli::add_train_command(app);
  pd::cli::add_profile_command(app);
  pd::cli::add_plan_command(app);
  pd::cli::add_simulate_command(app);
  pd::cli::add_schedule_command(app);
  pd::cli::add_run_command(app);
  pd::cli::add_bench_comm_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 uses exit code 0 for --help/--version, 105/106/... for errors;
    // every bad-flag error is "bad input", code 2.
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  } catch (const pd::UserError& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
