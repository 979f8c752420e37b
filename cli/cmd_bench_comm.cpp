// `pipedream bench-comm` - not implemented yet (stub).
#include "cli/commands.h"
#include "core/error.h"

namespace pd::cli {

void add_bench_comm_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-comm", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { throw RuntimeFailure("pipedream bench-comm is not implemented yet"); });
}

}  // namespace pd::cli
