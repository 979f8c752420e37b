// pipedream-bench core - not implemented yet (stub).
#include "bench/suites.h"
#include "core/error.h"

namespace pd::bench {

void add_core_suite(CLI::App& app) {
  auto* cmd = app.add_subcommand("core", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { throw RuntimeFailure("pipedream-bench core is not implemented yet"); });
}

}  // namespace pd::bench
