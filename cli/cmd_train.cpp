// `pipedream train`: single-worker training, the reference the pipelined
// runtime is checked against (same flags and defaults as `run`).
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/compute_settings.h"
#include "core/cuda_plugin.h"
#include "core/error.h"
#include "core/safetensors.h"
#include "core/text.h"
#include "models/loader.h"
#include "models/sharded_weights.h"
#include "planner/topology.h"
#include "runtime/checkpoint.h"
#include "runtime/metrics.h"
#include "runtime/trainer.h"

namespace pd::cli {

namespace {

struct TrainArgs {
  std::string model, spec_file, model_options, data = "fashion-mnist", data_dir, data_options;
  int loader_threads = -1;  // not given: the cores the compute threads leave
  TrainOptions train;
  std::string optimizer = "sgd", lr_schedule = "constant";  // parsed into train's enums
  int threads = 0;
  int64_t log_every = 10;
  std::string metrics, save;
  std::vector<std::string> init;  // --init: start from these weights
  std::string device = "cpu";
  bool deterministic = false;
  std::string precision = "fp32";  // parsed into train.precision
  bool allow_tf32 = false;
  std::string memory;  // --memory: the bound on the training state; default MemAvailable
};

// Ctrl-C or SIGTERM while training: the first asks the loop to stop before
// its next step (train throws Interrupted); a second one kills at once.
std::atomic<bool> g_stop{false};
void request_stop(int sig) {
  if (g_stop.exchange(true)) {
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

// Metrics lines every `log_every` steps (and the last), evaluations always;
// the bar on a terminal, plain evaluation lines otherwise.
class CliObserver final : public TrainObserver {
 public:
  CliObserver(MetricsWriter& w, ProgressBar& bar, int64_t log_every, int64_t total)
      : w_(w), bar_(bar), every_(log_every), total_(total) {}
  void on_data_wait(int64_t, double ms) override { data_wait_ms_ = ms; }
  void on_learning_rate(int64_t, float lr) override { lr_ = lr; }
  bool stop_requested() override { return g_stop.load(); }
  void on_grad_norm(int64_t step, double norm, float factor) override {
    if ((step + 1) % every_ == 0 || step + 1 == total_) w_.grad_norm(step, norm, factor);
  }
  void on_step(int64_t step, int64_t epoch, float loss, double sps) override {
    if ((step + 1) % every_ == 0 || step + 1 == total_) w_.step(step, epoch, loss, sps, data_wait_ms_, lr_);
    bar_.update(step + 1, epoch, loss, sps);
  }
  void on_eval(int64_t epoch, const EvalResult& r) override {
    w_.eval(epoch, r.loss, r.accuracy);
    char line[160];
    std::snprintf(line, sizeof line, "epoch %lld: test loss %.4f, test accuracy %.2f%%",
                  static_cast<long long>(epoch), r.loss, 100.0 * r.accuracy);
    bar_.message(line);
  }

 private:
  MetricsWriter& w_;
  ProgressBar& bar_;
  int64_t every_, total_;
  double data_wait_ms_ = -1, lr_ = -1;
};

// The machine's available memory (MemAvailable), 0 if unknown.
uint64_t available_memory_bytes() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  uint64_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return 0;
}

// One worker holds every parameter's weights, gradient, optimizer slots and
// delayed versions: a model whose training state exceeds the bound (--memory,
// else the machine's available memory) is refused before anything is
// allocated, with the size needed and a pipeline that would hold it.
void check_training_state_fits(const Model& model, const TrainArgs& a) {
  const uint64_t bound = a.memory.empty() ? available_memory_bytes() : parse_size(a.memory);
  if (bound == 0) return;
  const OptimizerConfig& opt = a.train.optimizer;
  const int slots = opt.kind == OptimizerKind::sgd ? (opt.momentum != 0.0f ? 1 : 0) : 2;
  const int copies = 2 + slots + a.train.gradient_delay;  // weights, gradients, slots, delayed versions
  const uint64_t weights = uint64_t(model.parameter_count()) * sizeof(float), need = weights * uint64_t(copies);
  if (need <= bound) return;
  const uint64_t workers = need / bound + 2;  // activations and a stage's imbalance come on top
  const std::string what = a.memory.empty() ? "the memory this machine has available" : "--memory";
  throw UserError(cat(
      "training ", model.name, " on one worker needs ", bytes_text(double(need)), " for its training state alone (",
      bytes_text(double(weights)), " of weights, as much again for gradients", slots ? cat(", ", slots, "x for ", to_string(opt.kind), "'s state") : std::string(),
      a.train.gradient_delay ? cat(", ", a.train.gradient_delay, "x for delayed weights") : std::string(), "; activations come on top), more than ",
      what, " (", bytes_text(double(bound)), "). Split it over workers instead: `pipedream profile --model ", a.model,
      " --memory ", bound, " -o profile.json`, `pipedream plan --profile profile.json --workers ", workers,
      " --bandwidth 1.25 --memory ", bound, " --schedule auto -o plan.json` (1.25 GB/s: 10 Gb Ethernet; give your "
      "network's), then `pipedream run --model ", a.model, " --plan plan.json` with the schedule the plan names"));
}

void run_train(const TrainArgs& given) {
  TrainArgs a = given;
  if (a.log_every < 1) throw UserError(cat("--log-every must be >= 1, got ", a.log_every));
  if (a.train.keep_checkpoints > 0 && a.train.checkpoint_dir.empty())
    throw UserError("--keep-checkpoints needs --checkpoint-dir");
  if (a.train.keep_checkpoints < 0) a.train.keep_checkpoints = kDefaultKeepCheckpoints;  // not given
  check_output_file("--save", a.save);
  check_output_file("--metrics", a.metrics);
  require_compute_device(a.device);  // no CUDA build / no GPU: refused before reading data
  // Validate everything cheap before reading data.
  make_optimizer(a.train.optimizer);
  Model model = resolve_model(a.model, a.spec_file, a.model_options);
  check_training_state_fits(model, a);
  DataSplits data = open_dataset(a.data, a.data_dir, model, parse_data_options(a.data_options));
  TrainOptions o = a.train;
  const int64_t steps = planned_steps(o, data.train->size());
  if (!o.checkpoint_dir.empty()) remove_partial_checkpoints(o.checkpoint_dir);  // an interrupted run's
  const NamedTensors init = a.init.empty() ? NamedTensors{} : load_named_weights(model, a.init);
  o.device = resolve_compute_device(a.device);
  apply_compute_settings({.device = o.device, .threads = threads_or_all_cores(a.threads), .precision = o.precision,
                          .deterministic = a.deterministic, .allow_tf32 = a.allow_tf32});
  o.loader_threads = a.loader_threads >= 0 ? a.loader_threads
                                           : default_loader_threads(o.device.is_cpu() ? compute_threads() : 1);

  std::fprintf(stderr, "training %s (%lld parameters) on %s: %lld samples, batch %lld, %lld steps, %s lr %g, %s%s\n",
               model.name.c_str(), static_cast<long long>(model.parameter_count()), a.data.c_str(),
               static_cast<long long>(data.train->size()), static_cast<long long>(o.batch),
               static_cast<long long>(steps), to_string(o.optimizer.kind), o.optimizer.lr,
               o.device.is_cpu() ? counted(compute_threads(), "thread", "threads").c_str() : o.device.str().c_str(),
               o.precision == Precision::BF16 ? ", bf16" : "");
  if (!init.empty()) std::fprintf(stderr, "starting from --init weights (%zu tensors)\n", init.size());
  // A resumed run's log continues the interrupted one's (runtime/metrics.h).
  MetricsWriter metrics(a.metrics, o.resume.empty() ? 0 : find_checkpoint(o.resume).step);
  ProgressBar bar(steps);
  CliObserver observer(metrics, bar, a.log_every, steps);
  std::signal(SIGINT, request_stop);
  std::signal(SIGTERM, request_stop);
  std::optional<ParameterStore> initial;
  if (!init.empty()) {
    initial = ParameterStore::create(model, o.seed, o.device);
    initial->load(init, "--init");
  }
  TrainResult r = train(model, *data.train, data.test.get(), o, &observer, initial ? &*initial : nullptr);
  bar.finish();

  if (r.first_step > 0)
    std::printf("trained steps %lld..%lld (resumed at step %lld) in %.1f s (%.0f samples/s)",
                static_cast<long long>(r.first_step), static_cast<long long>(r.steps - 1),
                static_cast<long long>(r.first_step), r.seconds, r.samples_per_s);
  else
    std::printf("trained %lld steps in %.1f s (%.0f samples/s)", static_cast<long long>(r.steps), r.seconds,
                r.samples_per_s);
  if (r.steps > r.first_step && r.seconds > 0)
    std::printf(", data wait %.1f ms/step (%.1f%% of step time, %s)",
                1e3 * r.data_wait_s / static_cast<double>(r.steps - r.first_step), 100.0 * r.data_wait_s / r.seconds,
                counted(o.loader_threads, "loader thread", "loader threads").c_str());
  if (!r.evals.empty())
    std::printf(", test loss %.4f, test accuracy %.2f%%", r.evals.back().loss, 100.0 * r.evals.back().accuracy);
  std::printf("\n");
  if (!o.checkpoint_dir.empty()) std::printf("checkpoints: %s (latest: step %lld)\n", o.checkpoint_dir.c_str(),
                                             static_cast<long long>(r.steps));
  if (!a.save.empty()) {
    const std::map<std::string, std::string> meta = {
        {"model", model.name}, {"spec", model.spec.dump()}, {"steps", std::to_string(r.steps)}};
    if (is_weight_index(a.save)) {  // asked for the sharded layout: one shard
      const std::string shard = weight_shard_path(a.save, 0, 1);
      const NamedTensors named = r.weights.named_tensors();
      save_safetensors(shard, named, meta);
      std::map<std::string, std::string> file_of;
      uint64_t total = 0;
      for (const auto& [name, t] : named) {
        file_of[name] = shard;
        total += t.nbytes();
      }
      write_weight_index(a.save, file_of, total);
    } else {
      save_safetensors(a.save, r.weights.named_tensors(), meta);
    }
    std::printf("saved weights to %s\n", a.save.c_str());
  }
}

}  // namespace

void add_train_command(CLI::App& app) {
  auto* cmd = app.add_subcommand("train", "Train a model on one worker (the reference for `run`)");
  auto a = std::make_shared<TrainArgs>();
  TrainOptions& t = a->train;
  // Defaults depend on the optimizer (see resolve_optimizer_defaults); NaN = not given.
  t.optimizer.lr = std::nanf("");
  t.optimizer.momentum = std::nanf("");
  cmd->add_option("--model", a->model, "Zoo model (see `pipedream models`) or a spec .json file");
  cmd->add_option("--model-spec", a->spec_file, "JSON model spec file")->check(CLI::ExistingFile);
  cmd->add_option("--model-options", a->model_options, "Zoo model options, e.g. width=0.5,image_size=32");
  cmd->add_option("--data", a->data,
                  "fashion-mnist | cifar10 | text | synthetic | images:DIR | npy:X.npy,Y.npy | npy:FILE.npz | "
                  "tokens:FILE.bin")
      ->capture_default_str();
  cmd->add_option("--data-dir", a->data_dir, "Dataset folder (cifar10), text file (text), or another fashion-mnist folder");
  cmd->add_option("--data-options", a->data_options,
                  "KEY=VALUE,... for images:, npy:, tokens: (mean=R/G/B, std=R/G/B, val=0.1, augment=1)");
  cmd->add_option("--loader-threads", a->loader_threads,
                  "Threads that fetch minibatches ahead of training (default: the cores the compute threads leave, "
                  "1 to 8; 0: fetch on the training thread)")
      ->check(CLI::Range(0, 64));
  auto* ep = cmd->add_option("--epochs", t.epochs, "Passes over the training set");
  auto* mb = cmd->add_option("--minibatches", t.minibatches, "Optimizer steps to take");
  ep->excludes(mb);
  cmd->add_option("--batch", t.batch, "Minibatch size")->capture_default_str();
  cmd->add_option("--optimizer", a->optimizer, "sgd | adam | adamw")->capture_default_str();
  cmd->add_option("--lr", t.optimizer.lr, "Learning rate (default: sgd 0.01, adam/adamw 0.001)");
  cmd->add_option("--momentum", t.optimizer.momentum, "SGD momentum (default 0.9)");
  cmd->add_option("--weight-decay", t.optimizer.weight_decay, "SGD/Adam: L2 on the gradient; AdamW: decoupled")
      ->capture_default_str();
  cmd->add_flag("--nesterov", t.optimizer.nesterov, "Nesterov momentum (SGD)");
  cmd->add_option("--beta1", t.optimizer.beta1, "Adam beta1")->capture_default_str();
  cmd->add_option("--beta2", t.optimizer.beta2, "Adam beta2")->capture_default_str();
  cmd->add_option("--lr-schedule", a->lr_schedule, "constant | step | cosine")->capture_default_str();
  cmd->add_option("--warmup", t.schedule.warmup_steps, "Linear warm-up steps")->capture_default_str();
  cmd->add_option("--lr-step-size", t.schedule.step_size, "step schedule: steps between decays");
  cmd->add_option("--lr-gamma", t.schedule.gamma, "step schedule: decay factor")->capture_default_str();
  cmd->add_option("--min-lr", t.schedule.min_lr, "cosine schedule: final learning rate")->capture_default_str();
  cmd->add_option("--seed", t.seed, "Seed of initialisation, sample order and dropout")->capture_default_str();
  cmd->add_option("--threads", a->threads, "Compute threads (default: all cores)");
  cmd->add_option("--gradient-delay", t.gradient_delay,
                  "Compute each step's gradient on the weights of d steps earlier (delayed SGD)")
      ->capture_default_str();
  cmd->add_option("--microbatches", t.microbatches,
                  "Run each minibatch as M microbatches of batch/M, gradients accumulated (what a flush pipeline with "
                  "M microbatches computes; BatchNorm and dropout per microbatch)")
      ->capture_default_str();
  cmd->add_option("--clip-grad-norm", t.clip_grad_norm,
                  "Scale each step's gradient down to this global L2 norm when it is larger "
                  "(torch.nn.utils.clip_grad_norm_); metrics get a grad_norm line per step line");
  cmd->add_option("--metrics", a->metrics, "Write JSON-lines metrics to this file");
  cmd->add_option("--log-every", a->log_every, "Write a step metrics line every N steps")->capture_default_str();
  cmd->add_option("--save", a->save, "Write the final weights (safetensors)");
  cmd->add_option("--memory", a->memory,
                  "Refuse (exit 2) before allocating when the training state (weights, gradients, optimizer state) "
                  "exceeds this (4000000000, 16GB, 16GiB; default: the machine's available memory)");
  cmd->add_option("--checkpoint-dir", t.checkpoint_dir, "Write checkpoints here (every --checkpoint-every steps and at the end)");
  cmd->add_option("--checkpoint-every", t.checkpoint_every, "Steps between checkpoints (0: only at the end)");
  t.keep_checkpoints = -1;  // not given: kDefaultKeepCheckpoints
  cmd->add_option("--keep-checkpoints", t.keep_checkpoints,
                  cat("Keep only the newest N checkpoints in --checkpoint-dir, removing older ones after each is "
                      "written (default ", kDefaultKeepCheckpoints, "; 0: keep all)"));
  auto* resume = cmd->add_option("--resume", t.resume,
                  "Continue from a checkpoint (a --checkpoint-dir or one step-N in it); --minibatches / --epochs "
                  "count the whole run, the checkpoint's steps included");
  cmd->add_option("--init", a->init,
                  "Start from these weights, matched by name: --save or export output, a checkpoint's step-N folder "
                  "or stage files, a PyTorch state_dict (safetensors)")
      ->excludes(resume);
  cmd->add_flag("!--no-eval", t.evaluate, "Skip test-set evaluation");
  cmd->add_option("--device", a->device, "cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_flag("--deterministic", a->deterministic, "GPU: deterministic cuDNN convolution algorithms only");
  cmd->add_option("--precision", a->precision,
                  "fp32 | bf16 (mixed precision: bf16 operands and activations, FP32 master weights and sums)")
      ->capture_default_str();
  add_allow_tf32_flag(*cmd, a->allow_tf32);
  cmd->callback([a, cmd] {
    TrainArgs args = *a;
    args.train.precision = parse_precision_flag(args.precision);
    refuse_allow_tf32_off_cuda(args.allow_tf32, args.device);
    args.train.optimizer.kind = parse_optimizer_flag(args.optimizer);
    args.train.schedule.kind = parse_lr_schedule_flag(args.lr_schedule);
    refuse_ignored_optimizer_flags(*cmd, args.train.optimizer.kind, args.train.schedule.kind);
    if (args.train.epochs == 0 && args.train.minibatches == 0) args.train.epochs = 1;
    resolve_optimizer_defaults(args.train.optimizer);
    run_train(args);
  });
}

// SGD's lr 0.01 with momentum 0.9: cnn 89.6% on Fashion-MNIST after 2
// epochs (lr 0.05 gave 88.7%).
void resolve_optimizer_defaults(OptimizerConfig& c) {
  const bool sgd = c.kind == OptimizerKind::sgd;
  if (std::isnan(c.lr)) c.lr = sgd ? 0.01f : 0.001f;
  if (std::isnan(c.momentum)) c.momentum = sgd ? 0.9f : 0.0f;
}

}  // namespace pd::cli
