// `pipedream profile` - not implemented yet (stub).
#include "cli/commands.h"
#include "core/error.h"

namespace pd::cli {

void add_profile_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("profile", "(not implemented yet)");
  cmd->allow_extras();
  cmd->callback([] { throw RuntimeFailure("pipedream profile is not implemented yet"); });
}

}  // namespace pd::cli
