// pipedream-bench planner - not implemented yet (stub).
#include "bench/suites.h"
#include "core/error.h"

namespace pd::bench {

void add_planner_suite(CLI::App& app) {
  auto* cmd = app.add_subcommand("planner", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { throw RuntimeFailure("pipedream-bench planner is not implemented yet"); });
}

}  // namespace pd::bench
