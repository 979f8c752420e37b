// `pipedream profile`: measure a model's per-layer costs on a device and
// write profile.json for `pipedream plan` (docs/design.md §4).
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/compute_settings.h"
#include "core/error.h"
#include "core/text.h"
#include "models/model.h"
#include "planner/topology.h"
#include "profiler/measure.h"

namespace pd::cli {
namespace {

struct ProfileArgs {
  std::string model, spec_file, model_options, device = "cpu", output = "profile.json", optimizer = "sgd";
  int64_t batch = 64;
  int threads = 0, warmup = 2, iters = 10;
  double min_time = 10;  // seconds; see --min-time
  uint64_t seed = 0;
  std::vector<int> microbatches;
  std::string memory;  // --memory: profile one layer at a time under this bound
  std::string precision = "fp32";
  bool allow_tf32 = false;
};

double mb(uint64_t bytes) { return double(bytes) / 1e6; }


// One line redrawn in place on a terminal; a line per phase otherwise (logs
// stay short but still show that something is happening).
class ProgressLine {
 public:
  ProgressLine(std::string model, std::string device)
      : model_(std::move(model)), device_(std::move(device)), tty_(::isatty(STDERR_FILENO) == 1) {}
  // Before the first iteration, which can be the slowest (allocation).
  void start(const ProfileOptions& o) {
    std::string plan = cat(o.warmup, " warm-up + ", o.iters, " measured iterations");
    min_seconds_ = o.min_seconds;
    if (min_seconds_ > 0) plan += cat(" (more until ", seconds_text(min_seconds_), " of measuring)");
    if (!o.microbatches.empty()) plan += cat(", then as many at each microbatch size");
    batch_ = o.batch;
    std::fprintf(stderr, tty_ ? "\r%s: %s\033[K" : "%s: %s\n", what().c_str(), plan.c_str());
    drawn_ = tty_;
    std::fflush(stderr);
  }
  void update(const ProfileProgress& p) {
    const char* phase = p.warmup ? "warm-up" : "measuring";
    batch_ = p.batch;
    if (tty_) {
      std::string at = cat(phase, " ", p.iteration, "/", std::max(p.iteration, p.iterations));
      if (!p.warmup && min_seconds_ > 0) at += cat(", ", seconds_text(p.elapsed_s), " of ", seconds_text(min_seconds_));
      std::fprintf(stderr, "\r%s: %s\033[K", what().c_str(), at.c_str());
      drawn_ = true;
    } else if (p.last) {
      std::fprintf(stderr, "%s: %s done (%d iterations)\n", what().c_str(), phase, p.iteration);
    }
    std::fflush(stderr);
  }
  void finish() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  std::string what() const { return cat("profiling ", model_, " (batch ", batch_, ", ", device_, ")"); }
  std::string model_, device_;
  int64_t batch_ = 0;
  bool tty_, drawn_ = false;
  double min_seconds_ = 0;
};

// The `caffe time` view: where the step's time goes.
void print_table(const Profile& p, const MeasureDetails& d) {
  const double sum = layer_time_sum_ms(p);
  size_t width = 5;
  for (const auto& n : p.nodes) width = std::max(width, n.name.size());
  // "share" is of the sum of the layers' times.
  std::printf("%-*s  %-12s %9s %9s %9s %9s %10s %9s %6s\n", int(width), "layer", "op", "fwd ms", "bwd ms", "fwd p90",
              "bwd p90", "act MB", "params MB", "share");
  std::printf("%s\n", std::string(width + 82, '-').c_str());
  for (const auto& n : p.nodes) {
    const double share = sum > 0 ? 100.0 * (n.forward_ms + n.backward_ms) / sum : 0;
    std::printf("%-*s  %-12s %9.3f %9.3f %9.3f %9.3f %10.3f %9.3f %5.1f%%\n", int(width), n.name.c_str(),
                n.op.c_str(), n.forward_ms, n.backward_ms, n.forward_p90_ms, n.backward_p90_ms,
                mb(n.activation_bytes), mb(n.parameter_bytes), share);
  }
  double fwd = 0, bwd = 0;
  uint64_t act = 0, params = 0;
  for (const auto& n : p.nodes) fwd += n.forward_ms, bwd += n.backward_ms, act += n.activation_bytes,
                                 params += n.parameter_bytes;
  std::printf("%s\n", std::string(width + 82, '-').c_str());
  std::printf("%-*s  %-12s %9.3f %9.3f %9s %9s %10.3f %9.3f\n", int(width), "sum", "", fwd, bwd, "", "", mb(act),
              mb(params));
  const double step = p.step_forward_backward_ms;
  std::printf("measured whole step (forward + loss + backward): %.3f ms (p90 %.3f); layer sum %.3f ms (%+.1f%%)\n",
              step, sample_p90(d.whole_step_ms), sum, step > 0 ? 100.0 * (sum - step) / step : 0.0);
  // The same steps' layer times summed per iteration: when this matches the
  // whole step but the sum of medians does not, the gap is noise (per-layer
  // medians drop each layer's outliers; a whole step keeps them).
  std::printf("instrumented step (layer times summed per iteration): median %.3f ms (p90 %.3f)\n",
              sample_median(d.instrumented_step_ms), sample_p90(d.instrumented_step_ms));
  if (p.host_probe_ms > 0) {
    // A shared host's speed moves in phases and every layer moves with it:
    // say so, so that two profiles are not compared as if the machine were
    // the same.
    const double drift = drift_between_halves(d.host_probe_ms);
    std::printf("host speed probe (a 256^3 GEMM between iterations): median %.3f ms; first vs second half of the "
                "measurement %.1f%% apart\n",
                p.host_probe_ms, 100.0 * drift);
    if (drift > 0.10)
      std::fprintf(stderr,
                   "warning: this machine's speed moved %.0f%% while measuring (host speed probe); a repeat profile "
                   "may differ as much. Measure longer (--min-time) or on a quieter machine.\n",
                   100.0 * drift);
  }
}

// What a microbatch costs against a linear share of the batch: the error
// `simulate` would make without these times.
void print_microbatch_times(const Profile& p) {
  for (int b : p.measured_microbatch_sizes()) {
    double sum = 0;
    for (const ProfileNode& n : p.nodes) sum += n.times_at(b)->forward_ms + n.times_at(b)->backward_ms;
    const double linear = layer_time_sum_ms(p) * b / p.batch_size;
    std::printf("at batch %d (1/%d of the batch): layer sum %.3f ms, %.2fx a linear share of the batch's\n", b,
                p.batch_size / b, sum, linear > 0 ? sum / linear : 0.0);
  }
}

void run_profile(const ProfileArgs& a) {
  if (a.model.empty() && a.spec_file.empty()) throw UserError("give --model NAME (see `pipedream models`) or --model-spec FILE");
  if (!a.model.empty() && !a.spec_file.empty()) throw UserError("give --model or --model-spec, not both");
  if (a.output.empty()) throw UserError("-o/--output must name a file");
  check_output_file("-o", a.output);
  ProfileOptions o;
  o.batch = a.batch;
  o.device = Device::parse(a.device);
  o.threads = a.threads;
  o.warmup = a.warmup;
  o.iters = a.iters;
  o.min_seconds = a.min_time;
  o.seed = a.seed;
  o.precision = parse_precision_flag(a.precision);
  o.optimizer.kind = parse_optimizer_flag(a.optimizer);
  o.optimizer.momentum = o.optimizer.kind == OptimizerKind::sgd ? 0.9f : 0.0f;
  o.microbatches = a.microbatches;
  if (!a.memory.empty()) o.memory_bytes = parse_size(a.memory);
  refuse_allow_tf32_off_cuda(a.allow_tf32, a.device);
  o.allow_tf32 = a.allow_tf32;
  // Cheap checks first: a bad batch or device should not wait for a model build.
  check_profile_options(o);
  Model model = resolve_model(a.model, a.spec_file, a.model_options);

  ProgressLine line(model.name, o.device.str());
  o.progress = [&line](const ProfileProgress& p) { line.update(p); };
  line.start(o);
  apply_compute_settings({.device = o.device, .threads = threads_or_all_cores(o.threads), .precision = o.precision,
                          .allow_tf32 = o.allow_tf32});
  Profile p;
  MeasureDetails details;
  try {
    p = measure_profile(model, o, &details);
  } catch (...) {
    line.finish();
    throw;
  }
  line.finish();
  p.model_argument = a.model, p.model_spec_file = a.spec_file, p.model_options = a.model_options;

  std::printf("%s, batch %d, %s, %s%s, %d threads, median of %d iterations (%s) after %d warm-up\n", p.model.c_str(),
              p.batch_size, p.device.c_str(), p.dtype.c_str(),
              p.precision == Precision::BF16 ? " (bf16 mixed precision: bf16 sizes)" : "", p.threads, p.measured_iterations,
              seconds_text(p.measured_seconds).c_str(), p.warmup_iterations);
  if (o.memory_bytes)
    std::printf("--memory %s: one layer at a time (its weights, gradients and optimizer state, on a synthetic input "
                "of its recorded shape), freed before the next; the step time is the layers' sum\n",
                bytes_text(double(o.memory_bytes)).c_str());
  print_table(p, details);
  print_microbatch_times(p);
  std::printf("optimizer state counted for %s\n", optimizer_state_description(o.optimizer).c_str());
  write_profile_json(p, a.output);
  std::printf("wrote %s\n", a.output.c_str());
}

}  // namespace

void add_profile_command(CLI::App& app) {
  auto a = std::make_shared<ProfileArgs>();
  auto* cmd = app.add_subcommand("profile", "Measure per-layer compute time and memory of a model (profile.json)");
  cmd->add_option("--model", a->model, "Zoo model (see `pipedream models`) or a spec .json file");
  cmd->add_option("--model-spec", a->spec_file, "JSON model spec file");
  cmd->add_option("--model-options", a->model_options, "Zoo model options, e.g. width=0.5,image_size=32");
  cmd->add_option("--batch", a->batch, "Minibatch size (per worker, as it will train)")->capture_default_str();
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Compute threads, as the run will use (default: all cores)");
  cmd->add_option("--warmup", a->warmup, "Unmeasured iterations first")->capture_default_str();
  cmd->add_option("--iters", a->iters, "Measured iterations (median and p90 over them)")->capture_default_str();
  cmd->add_option("--min-time", a->min_time,
                  "Measure at least this many seconds (more iterations than --iters if needed); "
                  "tens of seconds give medians that repeat on a shared host")
      ->capture_default_str();
  cmd->add_option("--optimizer", a->optimizer, "Optimizer whose state bytes are recorded: sgd (momentum) | adam | adamw")
      ->capture_default_str();
  cmd->add_option("--seed", a->seed, "Seed of weights and synthetic inputs")->capture_default_str();
  cmd->add_option("--precision", a->precision,
                  "fp32 | bf16 (layers run with bf16's rounding points; activation and message sizes in bf16)")
      ->capture_default_str();
  cmd->add_option("--microbatches", a->microbatches,
                  "Also measure each layer at batch / M for these M (e.g. 4,8): a flush schedule's microbatches, "
                  "which simulate then costs as measured instead of a linear share of the batch")
      ->delimiter(',');
  cmd->add_option("--memory", a->memory,
                  "Hold at most this much (4000000000, 16GB, 16GiB): build and time one layer at a time, each freed "
                  "before the next, for a model bigger than this machine (default: the whole model at once)");
  cmd->add_option("-o,--output", a->output, "Profile to write (atomically, only on success)")->capture_default_str();
  add_allow_tf32_flag(*cmd, a->allow_tf32);
  cmd->callback([a] { run_profile(*a); });
}

}  // namespace pd::cli
