#pragma once
// Checks of the command line: every value of every option of every
// subcommand is checked while the command line is parsed (exit 2, naming the
// flag), before any work starts, and flags that would do nothing in their
// context are refused instead of ignored.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "core/optimizer.h"
#include "core/precision.h"

namespace pd {
struct Plan;
}

namespace pd::cli {

// Attaches a value check to every option of every subcommand of `app`, by the
// option's type unless option_checks.cpp has a rule for the flag (per
// command, or for every command that has it):
//   no value is empty ('' is never "not given" or 0);
//   integers: decimal only, no overflow, in the rule's range (default
//             [0, 2^53]); "010" is ten, not octal eight;
//   seeds (unsigned 64-bit): decimal in [0, 2^64 - 1], "-1" is an error;
//   numbers: finite, in the rule's range (default [0, FLT_MAX]);
//   sizes (--memory, --p2p-sizes, ...): parse_size's syntax, in range.
// Call once, after every subcommand has added its options.
void check_option_values(CLI::App& app);

// `run --reference` executes the workers in one process: it writes no
// checkpoints, trace or resumes, so those flags are refused with it.
void reject_options_reference_ignores(CLI::App& run);

// UserError "<flag> <why>" when `flag` was given on `command`'s line and
// `applies` is false: a flag the chosen settings ignore is refused.
void refuse_unless_applies(const CLI::App& command, const std::string& flag, bool applies, const std::string& why);

// --allow-tf32 (TF32 tensor cores for FP32 GEMMs and convolutions on a GPU)
// given with --device cpu: UserError naming the flag, as refuse_unless_applies
// does for flags the context ignores.
void refuse_allow_tf32_off_cuda(bool allow_tf32, const std::string& device);

// The --allow-tf32 flag, with one description for every command that has it.
void add_allow_tf32_flag(CLI::App& command, bool& allow_tf32);

// train's and run's optimizer and learning-rate flags that the chosen
// --optimizer or --lr-schedule ignores (--beta1 with sgd, --min-lr with
// step, ...).
void refuse_ignored_optimizer_flags(const CLI::App& command, OptimizerKind optimizer, LrShape lr_schedule);

// The value of --optimizer / --lr-schedule; UserError naming the flag and its
// spellings for any other text.
OptimizerKind parse_optimizer_flag(const std::string& text);
LrShape parse_lr_schedule_flag(const std::string& text);
// The value of --precision (fp32 | bf16); UserError naming the flag otherwise.
Precision parse_precision_flag(const std::string& text);

// An output file named by `flag`: UserError when `path` is a folder or its
// folder does not exist, so that the mistake shows before any work. Empty
// paths (output not asked for) pass.
void check_output_file(const std::string& flag, const std::string& path);

// The one check simulate, schedule and run share: a plan whose topology
// lists fewer workers than its stages use (`workers`, the schedule's) is
// refused, naming `source` (the --plan file). A plan without a topology
// passes (run does not need bandwidths).
void check_plan_topology(const Plan& plan, int workers, const std::string& source);

// Stage passes (minibatches x microbatches per batch x the plan's workers)
// that simulate replays and schedule prints at most: a replay of 2 x 10^6
// took 2.6 s and a printed schedule of 10^5 took 4 s and 19 MB
// (docs/measurements.md), so these bound a typo to seconds, not hours.
constexpr int64_t kMaxReplayPasses = 20'000'000;
constexpr int64_t kMaxPrintedPasses = 200'000;

// UserError naming --minibatches and --microbatches when a schedule of
// `workers` workers runs more than `limit` stage passes (above).
void check_schedule_length(const std::string& command, int64_t minibatches, int microbatches, int workers,
                           int64_t limit);

}  // namespace pd::cli
