#include "cli/option_checks.h"

#include <filesystem>
#include <limits>
#include <string>
#include <variant>

#include "core/checked.h"
#include "core/cpu/gemm.h"

namespace pd::cli {
namespace {

struct IntegerRule {
  int64_t lo, hi;
};
struct NumberRule {
  double lo, hi;
};
using Rule = std::variant<IntegerRule, NumberRule>;

constexpr int64_t kMaxCount = checked::kMaxCount;
constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
// Optimizer settings are floats: a finite double past this is inf as a float.
constexpr double kMaxFloat = std::numeric_limits<float>::max();

struct OptionRule {
  const char* flag;
  Rule rule;
};

// One rule per flag, whichever command has it. Counts that the user gives
// must be positive: "--minibatches 0" is not "the default".
const OptionRule kRules[] = {
    {"--epochs", IntegerRule{1, kMaxCount}},
    {"--minibatches", IntegerRule{1, kMaxCount}},
    {"--batch", IntegerRule{1, kMaxInt}},
    {"--eval-batch", IntegerRule{1, kMaxInt}},
    {"--eval-every", IntegerRule{0, kMaxCount}},
    {"--log-every", IntegerRule{1, kMaxCount}},
    {"--checkpoint-every", IntegerRule{0, kMaxCount}},
    {"--gradient-delay", IntegerRule{0, 1 << 20}},
    {"--warmup", IntegerRule{0, kMaxInt}},
    {"--iters", IntegerRule{1, kMaxInt}},
    {"--lr-step-size", IntegerRule{0, kMaxCount}},
    {"--threads", IntegerRule{0, cpu::kMaxComputeThreads}},  // 0: all cores
    {"--threads-per-worker", IntegerRule{1, cpu::kMaxComputeThreads}},
    {"--lr", NumberRule{0, kMaxFloat}},
    {"--momentum", NumberRule{0, 1}},
    {"--weight-decay", NumberRule{0, kMaxFloat}},
    {"--beta1", NumberRule{0, 1}},
    {"--beta2", NumberRule{0, 1}},
    {"--lr-gamma", NumberRule{0, kMaxFloat}},
    {"--min-lr", NumberRule{0, kMaxFloat}},
    {"--timeout", NumberRule{0, 1e9}},
    {"--min-time", NumberRule{0, 1e9}},
};

// CLI11 prefixes the flag: "--threads: must be an integer in [1, 1024], got 65536".
std::string problem(const Rule& rule, const std::string& text) {
  try {
    if (auto* i = std::get_if<IntegerRule>(&rule)) checked::parse_integer(text, {}, i->lo, i->hi);
    else if (auto* n = std::get_if<NumberRule>(&rule)) checked::parse_number(text, {}, n->lo, n->hi);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

void check_numeric_options(CLI::App& command) {
  for (const OptionRule& r : kRules) {
    CLI::Option* option = command.get_option_no_throw(r.flag);
    if (!option) continue;
    const Rule rule = r.rule;
    option->check(CLI::Validator([rule](std::string& text) { return problem(rule, text); }, ""));
  }
}

void reject_options_reference_ignores(CLI::App& run) {
  CLI::Option* reference = run.get_option("--reference");
  for (const char* flag : {"--checkpoint-dir", "--trace", "--svg", "--resume"}) reference->excludes(run.get_option(flag));
}

void check_output_file(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  if (fs::is_directory(path)) throw UserError(cat(flag, " ", path, " is a folder: name the file to write"));
  const fs::path folder = fs::path(path).parent_path();
  if (!folder.empty() && !fs::is_directory(folder))
    throw UserError(cat(flag, " ", path, ": folder ", folder.string(), " does not exist"));
}

}  // namespace pd::cli
