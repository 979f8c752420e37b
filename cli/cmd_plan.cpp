// `pipedream plan` - not implemented yet (stub).
#include "cli/commands.h"
#include "core/error.h"

namespace pd::cli {

void add_plan_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("plan", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { throw RuntimeFailure("pipedream plan is not implemented yet"); });
}

}  // namespace pd::cli
