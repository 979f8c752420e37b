// pipedream-bench simulate - not implemented yet (stub).
#include "bench/suites.h"
#include "core/error.h"

namespace pd::bench {

void add_simulate_suite(CLI::App& app) {
  auto* cmd = app.add_subcommand("simulate", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { throw RuntimeFailure("pipedream-bench simulate is not implemented yet"); });
}

}  // namespace pd::bench
