// pipedream-bench: core | planner | simulate | runtime. JSON lines on stdout.
#include <iostream>

#include "bench/suites.h"
#include "core/cpu/openmp_policy.h"
#include "core/error.h"

int main(int argc, char** argv) {
  // Before MPI or OpenMP start: sleeping OpenMP waits (see openmp_policy.h).
  pd::cpu::ensure_passive_openmp_wait(argv);
  CLI::App app{"pipedream benchmarks (JSON lines on stdout)"};
  app.require_subcommand(1);
  pd::bench::add_core_suite(app);
  pd::bench::add_planner_suite(app);
  pd::bench::add_simulate_suite(app);
  pd::bench::add_runtime_suite(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
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
