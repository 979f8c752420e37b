#include "cli/option_checks.h"

#include <charconv>
#include <cstring>
#include <filesystem>
#include <limits>
#include <string>
#include <variant>

#include "core/checked.h"
#include "core/compute_settings.h"
#include "core/precision_names.h"
#include "planner/plan.h"
#include "planner/topology.h"

namespace pd::cli {
namespace {

struct IntegerRule {
  int64_t lo, hi;
};
// A seed: any unsigned 64-bit value, but "-1" is not 2^64 - 1.
struct SeedRule {};
struct NumberRule {
  double lo, hi;
  bool above_lo = false;  // lo itself excluded ("> 0")
};
// Bytes as parse_size reads them ("4000000000", "16GB", "512MiB").
struct SizeRule {
  uint64_t lo, hi;
};
// Any text (but not empty, as every value).
struct TextRule {};
using Rule = std::variant<IntegerRule, SeedRule, NumberRule, SizeRule, TextRule>;

constexpr int64_t kMaxCount = checked::kMaxCount;
constexpr int64_t kMaxInt = std::numeric_limits<int>::max();
// Optimizer settings are floats: a finite double past this is inf as a float.
constexpr double kMaxFloat = std::numeric_limits<float>::max();
// Topology files take bandwidths in this range (planner/topology.cpp).
constexpr double kMinBandwidth = 1e-9, kMaxBandwidth = 1e9;
// Workers of one topology level, as topology files allow.
constexpr int64_t kMaxWorkers = int64_t{1} << 24;
// Epochs times steps per epoch must stay far below 2^63.
constexpr int64_t kMaxEpochs = 1'000'000;
// A flush batch split finer than this is no longer a pipeline of microbatches.
constexpr int64_t kMaxMicrobatches = 65536;

struct OptionRule {
  const char* command;  // nullptr: every command with the flag
  const char* flag;
  Rule rule;
  const char* limit_note = nullptr;  // why the upper bound, for the message
};

// One rule per flag and command; the first match wins, so command-specific
// rules come before the shared ones. Counts that the user gives must be
// positive: "--minibatches 0" is not "the default".
const OptionRule kRules[] = {
    {"simulate", "--minibatches", IntegerRule{1, kMaxReplayPasses}, "what simulate replays in reasonable time"},
    {"schedule", "--minibatches", IntegerRule{1, kMaxPrintedPasses}, "what schedule prints in reasonable time"},
    {"simulate", "--threads", IntegerRule{1, kMaxComputeThreads}},
    {"simulate", "--batch-size", IntegerRule{1, kMaxInt}},
    {"simulate", "--cores", NumberRule{0, 1e6}},  // 0: every worker has its own device
    {"simulate", "--contention", NumberRule{0, 1e6}},
    {"simulate", "--weight-grad-share", NumberRule{0, 0.99}},
    {"schedule", "--worker", IntegerRule{0, kMaxWorkers}},
    {"schedule", "--limit", IntegerRule{1, kMaxCount}},
    // The profiler keeps every iteration's layer times.
    {"profile", "--warmup", IntegerRule{0, 1'000'000}},
    {"profile", "--iters", IntegerRule{1, 1'000'000}, "each iteration's layer times are kept"},
    {"profile", "--min-time", NumberRule{0, 3600}, "each iteration's layer times are kept"},
    {"plan", "--workers", IntegerRule{1, kMaxWorkers}},
    {"plan", "--bandwidth", NumberRule{kMinBandwidth, kMaxBandwidth}, "the range topology files take, in GB/s"},
    {"plan", "--activation-compression-ratio", NumberRule{0, 1e9, true}},
    {"plan", "--max-antichain-states", IntegerRule{1, 10'000'000}, "each state is kept in memory"},
    {"plan", "--memory", SizeRule{1, checked::kMaxCount}},
    {"train", "--memory", SizeRule{1, checked::kMaxCount}},
    {"profile", "--memory", SizeRule{1, checked::kMaxCount}},
    {"run", "--workers", IntegerRule{1, kMaxWorkers}},
    {"bench-comm", "--latency-iters", IntegerRule{1, 10'000'000}},
    {"bench-comm", "--worker-memory", SizeRule{1, checked::kMaxCount}},
    // Each rank holds four buffers of the largest size.
    {"bench-comm", "--p2p-sizes", SizeRule{1, uint64_t{1} << 30}, "each rank holds four such buffers"},
    {"bench-comm", "--allreduce-sizes", SizeRule{1, uint64_t{1} << 30}},
    {nullptr, "--epochs", IntegerRule{1, kMaxEpochs}},
    {nullptr, "--minibatches", IntegerRule{1, kMaxCount}},
    {nullptr, "--microbatches", IntegerRule{1, kMaxMicrobatches}},
    {nullptr, "--virtual-stages", IntegerRule{1, 255}},
    {nullptr, "--batch", IntegerRule{1, kMaxInt}},
    {nullptr, "--eval-batch", IntegerRule{1, kMaxInt}},
    {nullptr, "--eval-every", IntegerRule{0, kMaxCount}},
    {nullptr, "--log-every", IntegerRule{1, kMaxCount}},
    {nullptr, "--checkpoint-every", IntegerRule{0, kMaxCount}},
    {nullptr, "--keep-checkpoints", IntegerRule{0, kMaxCount}},
    {nullptr, "--svg-minibatches", IntegerRule{1, kMaxCount}},
    {nullptr, "--gradient-delay", IntegerRule{0, 1 << 20}},
    {nullptr, "--warmup", IntegerRule{0, kMaxInt}},
    {nullptr, "--lr-step-size", IntegerRule{1, kMaxCount}},
    {nullptr, "--threads", IntegerRule{0, kMaxComputeThreads}},  // 0: all cores
    {nullptr, "--threads-per-worker", IntegerRule{1, kMaxComputeThreads}},
    {nullptr, "--seed", SeedRule{}},
    {nullptr, "--lr", NumberRule{0, kMaxFloat}},
    {nullptr, "--momentum", NumberRule{0, 1}},
    {nullptr, "--weight-decay", NumberRule{0, kMaxFloat}},
    {nullptr, "--beta1", NumberRule{0, 1}},
    {nullptr, "--beta2", NumberRule{0, 1}},
    {nullptr, "--lr-gamma", NumberRule{0, kMaxFloat}},
    {nullptr, "--min-lr", NumberRule{0, kMaxFloat}},
    {nullptr, "--clip-grad-norm", NumberRule{0, kMaxFloat, true}},
    {nullptr, "--timeout", NumberRule{0, 1e9, true}},
};

// The rule of an option without one in the table, by its CLI11 type.
Rule default_rule(const CLI::Option& option) {
  const std::string type = option.get_type_name();
  if (type == "INT") return IntegerRule{0, kMaxCount};
  if (type == "UINT") return IntegerRule{0, kMaxCount};
  if (type == "FLOAT") return NumberRule{0, kMaxFloat};
  return TextRule{};
}

// CLI11 prefixes the flag: "--threads: must be an integer in [0, 1024], got 65536".
const checked::Field kFlag;

std::string number_rule_text(const NumberRule& n) {
  if (!n.above_lo) return checked::number_rule(n.lo, n.hi);
  if (n.hi >= 1e30) return cat("a finite number > ", n.lo);
  return cat("a finite number > ", n.lo, " and <= ", n.hi);
}

// Each check throws UserError for a bad `text`. Integers are rewritten in
// decimal, which is how CLI11 (strtoll, base 0) then reads them: "010"
// stays ten instead of becoming octal eight.
void check(const IntegerRule& r, std::string& text) {
  text = std::to_string(checked::parse_integer(text, kFlag, r.lo, r.hi));
}

void check(const SeedRule&, std::string& text) {
  uint64_t seed = 0;
  const char* end = text.data() + text.size();
  auto [at, ec] = std::from_chars(text.data(), end, seed);  // no sign: "-1" fails
  if (text.empty() || ec != std::errc() || at != end) throw kFlag.error("an integer in [0, 2^64 - 1]", text);
  text = std::to_string(seed);
}

void check(const NumberRule& r, std::string& text) {
  double x = 0;
  try {
    x = checked::parse_number(text, kFlag, r.lo, r.hi);
  } catch (const UserError&) {
    throw kFlag.error(number_rule_text(r), text);
  }
  if (r.above_lo && x == r.lo) throw kFlag.error(number_rule_text(r), text);
}

void check(const SizeRule& r, std::string& text) {
  const uint64_t bytes = parse_size(text);
  if (bytes < r.lo || bytes > r.hi) throw kFlag.error(cat("a size of ", r.lo, " to ", r.hi, " bytes"), text);
}

void check(const TextRule&, std::string&) {}

// The problem with `text`, or "" when it is valid. No value may be empty:
// CLI11 would read '' as 0 or as "not given".
std::string problem(const Rule& rule, std::string& text) {
  if (text.empty()) return "must not be empty (leave the flag out for its default)";
  try {
    std::visit([&text](const auto& r) { check(r, text); }, rule);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

const OptionRule* rule_for(const std::string& command, const CLI::Option& option) {
  for (const OptionRule& r : kRules)
    if ((!r.command || command == r.command) && option.check_name(r.flag)) return &r;
  return nullptr;
}

}  // namespace

void check_option_values(CLI::App& app) {
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
    const std::string name = command->get_name();
    for (CLI::Option* option : command->get_options()) {
      if (option->get_expected_min() == 0 || option->get_type_name().empty()) continue;  // flags, --help
      const OptionRule* r = rule_for(name, *option);
      const Rule rule = r ? r->rule : default_rule(*option);
      const std::string note = r && r->limit_note ? cat(" (", r->limit_note, ")") : std::string();
      // transform, not check: check() hides the rewritten text from CLI11.
      option->transform(CLI::Validator(
          [rule, note](std::string& text) {
            std::string p = problem(rule, text);
            return p.empty() ? p : p + note;
          },
          ""));
    }
  }
}

void reject_options_reference_ignores(CLI::App& run) {
  CLI::Option* reference = run.get_option("--reference");
  for (const char* flag : {"--checkpoint-dir", "--trace", "--svg", "--resume"}) reference->excludes(run.get_option(flag));
}

void refuse_unless_applies(const CLI::App& command, const std::string& flag, bool applies, const std::string& why) {
  const CLI::Option* option = command.get_option_no_throw(flag);
  if (!applies && option && option->count() > 0) throw UserError(cat(flag, " ", why));
}

void refuse_allow_tf32_off_cuda(bool allow_tf32, const std::string& device) {
  if (allow_tf32 && device == "cpu")
    throw UserError("--allow-tf32 applies to CUDA only (--device cuda or cuda:N), not --device cpu");
}

void add_allow_tf32_flag(CLI::App& command, bool& allow_tf32) {
  command.add_flag("--allow-tf32", allow_tf32,
                   "GPU: TF32 tensor cores for FP32 matrix multiplies and convolutions (10-bit mantissa products, "
                   "FP32 accumulation; PyTorch's allow_tf32); off: exact FP32");
}

void refuse_ignored_optimizer_flags(const CLI::App& command, OptimizerKind optimizer, LrShape lr_schedule) {
  const bool adam = optimizer == OptimizerKind::adam || optimizer == OptimizerKind::adamw;
  for (const char* flag : {"--beta1", "--beta2"})
    refuse_unless_applies(command, flag, adam,
                          cat("applies to --optimizer adam and adamw only, not ", to_string(optimizer)));
  for (const char* flag : {"--lr-step-size", "--lr-gamma"})
    refuse_unless_applies(command, flag, lr_schedule == LrShape::step,
                          cat("applies to --lr-schedule step only, not ", to_string(lr_schedule)));
  refuse_unless_applies(command, "--min-lr", lr_schedule == LrShape::cosine,
                        cat("applies to --lr-schedule cosine only, not ", to_string(lr_schedule)));
}

OptimizerKind parse_optimizer_flag(const std::string& text) {
  if (std::optional<OptimizerKind> kind = parse_optimizer_kind(text)) return *kind;
  throw UserError(cat("--optimizer ", text, ": use sgd, adam or adamw"));
}

Precision parse_precision_flag(const std::string& text) {
  if (std::optional<Precision> p = parse_precision(text)) return *p;
  throw UserError(cat("--precision ", text, ": use fp32 or bf16"));
}

LrShape parse_lr_schedule_flag(const std::string& text) {
  if (std::optional<LrShape> kind = parse_lr_schedule_kind(text)) return *kind;
  throw UserError(cat("--lr-schedule ", text, ": use constant, step or cosine"));
}

void check_output_file(const std::string& flag, const std::string& path) {
  namespace fs = std::filesystem;
  if (path.empty()) return;
  if (fs::is_directory(path)) throw UserError(cat(flag, " ", path, " is a folder: name the file to write"));
  const fs::path folder = fs::path(path).parent_path();
  if (!folder.empty() && !fs::is_directory(folder))
    throw UserError(cat(flag, " ", path, ": folder ", folder.string(), " does not exist"));
}

void check_plan_topology(const Plan& plan, int workers, const std::string& source) {
  if (plan.topology.levels.empty() || plan.topology.total_workers() >= workers) return;
  throw UserError(cat(source, ": the plan's topology has ", plan.topology.total_workers(), " workers but its stages use ",
                      workers, " (edit the topology or the stages' replicas)"));
}

void check_schedule_length(const std::string& command, int64_t minibatches, int microbatches, int workers,
                           int64_t limit) {
  const int64_t per_minibatch = int64_t{std::max(1, microbatches)} * std::max(1, workers);
  if (minibatches <= limit / per_minibatch) return;
  throw UserError(cat("--minibatches ", minibatches, " x --microbatches ", std::max(1, microbatches), " on ",
                      std::max(1, workers), " workers is more than the ", limit, " stage passes ", command,
                      " handles in reasonable time: give fewer --minibatches"));
}

}  // namespace pd::cli
