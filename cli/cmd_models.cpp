// `pipedream models` - not implemented yet (stub).
#include "cli/commands.h"
#include "core/error.h"

namespace pd::cli {

void add_models_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("models", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { throw RuntimeFailure("pipedream models is not implemented yet"); });
}

}  // namespace pd::cli
