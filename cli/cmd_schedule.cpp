// `pipedream schedule` - not implemented yet (stub).
#include "cli/commands.h"
#include "core/error.h"

namespace pd::cli {

void add_schedule_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("schedule", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { throw RuntimeFailure("pipedream schedule is not implemented yet"); });
}

}  // namespace pd::cli
