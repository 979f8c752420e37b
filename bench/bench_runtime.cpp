// pipedream-bench runtime - not implemented yet (stub).
#include "bench/suites.h"
#include "core/error.h"

namespace pd::bench {

void add_runtime_suite(CLI::App& app) {
  auto* cmd = app.add_subcommand("runtime", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { throw RuntimeFailure("pipedream-bench runtime is not implemented yet"); });
}

}  // namespace pd::bench
