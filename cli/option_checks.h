#pragma once
// Range checks of the numeric command-line options, through core/checked.h:
// "--lr nan", "--threads 65536" or "--minibatches 0" are refused while the
// command line is parsed (exit 2, naming the flag), before any work starts.
#include <string>

#include <CLI/CLI.hpp>

namespace pd::cli {

// Attaches a validator to every option of `command` that has a rule in
// option_checks.cpp (by flag name, so that train, run and profile share one
// rule per flag). Flags without a rule are left as they are.
void check_numeric_options(CLI::App& command);

// `run --reference` executes the workers in one process: it writes no
// checkpoints, trace or resumes, so those flags are refused with it.
void reject_options_reference_ignores(CLI::App& run);

// An output file named by `flag`: UserError when `path` is a folder or its
// folder does not exist, so that the mistake shows before any work. Empty
// paths (output not asked for) pass.
void check_output_file(const std::string& flag, const std::string& path);

}  // namespace pd::cli
