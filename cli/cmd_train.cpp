// `pipedream train` - not implemented yet (stub).
#include "cli/commands.h"
#include "core/error.h"

namespace pd::cli {

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { throw RuntimeFailure("pipedream train is not implemented yet"); });
}

}  // namespace pd::cli
