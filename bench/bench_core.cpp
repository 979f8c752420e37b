// pipedream-bench core: single-worker training-step throughput of the CPU
// compute core on the zoo models, one JSON line per workload. A step is
// what `pipedream train` does per minibatch: zero the gradients, forward,
// softmax cross-entropy, backward (no input gradient for the first layer),
// SGD with momentum 0.9. Inputs and labels are synthetic (fixed for the
// run), so only compute is measured. bench/torch_peer.py runs the same
// workloads in PyTorch; bench/compare_core.sh prints the ratio.
//
// --model M [--model-options K=V,...] --batch B times the same step on any
// model the CLI accepts instead (a zoo name, a spec .json, an .onnx file);
// bench/onnx_speed.sh uses it to compare an imported resnet18 with the
// zoo's and with PyTorch.
//
// --device cuda runs the same step on the GPU (weights, gradients,
// optimizer state and the inputs on the device; labels fetched from the
// host each step, as training does) and synchronises the device before
// every clock read, so a step's time includes its kernels, not just their
// launches. "median_step_cpu_ms" then counts the host's work only.
// --allow-tf32 lets cuBLAS and cuDNN use TF32 tensor cores for FP32
// operands (PyTorch's allow_tf32); each line says so in "allow_tf32".
#include <algorithm>
#include <chrono>
#include <ctime>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/suites.h"
#include "core/build_info.h"
#include "core/compute_settings.h"
#include "core/device_ops.h"
#include "core/error.h"
#include "core/bf16_rounding.h"
#include "core/loss.h"
#include "core/op_times.h"
#include "core/optimizer.h"
#include "core/precision_names.h"
#include "core/rng.h"
#include "models/layer_range.h"
#include "models/model.h"
#include "models/parameters.h"

#include "core/cuda_plugin.h"

namespace pd::bench {

namespace {

struct CoreWorkload {
  std::string name;  // zoo name
  int64_t batch;
};

// The fixed set: batch sizes are part of the workload definition
// so that the PyTorch peer and earlier results stay comparable.
const std::vector<CoreWorkload>& core_workloads() {
  static const std::vector<CoreWorkload> w = {
      {"mlp", 128}, {"cnn", 64}, {"vgg-mini", 32}, {"gpt-mini", 8}, {"resnet50", 64}};
  return w;
}

struct CoreOptions {
  int threads = 1;
  std::string workloads = "mlp,cnn,vgg-mini,gpt-mini";
  int warmup = 3;
  int steps = 10;
  std::string device = "cpu";
  uint64_t seed = 1;
  int64_t batch = 0;  // 0: each workload's own batch
  bool deterministic = false;
  bool allow_tf32 = false;  // GPU: TF32 tensor cores for FP32 GEMMs and convolutions
  std::string model, model_options;  // --model: time this model instead of the workloads
  std::string precision_flag = "fp32";
  Precision precision = Precision::FP32;  // parsed from precision_flag
  bool op_times = false;  // --op-times: a core_ops line per DeviceOps entry
};

std::vector<CoreWorkload> select_workloads(const std::string& list) {
  std::vector<CoreWorkload> out;
  std::stringstream ss(list);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty()) continue;
    auto it = std::find_if(core_workloads().begin(), core_workloads().end(),
                           [&](const CoreWorkload& w) { return w.name == item; });
    if (it == core_workloads().end())
      throw UserError(cat("unknown workload '", item, "' (workloads: mlp, cnn, vgg-mini, gpt-mini, resnet50)"));
    out.push_back(*it);
  }
  if (out.empty()) throw UserError("--workloads is empty (workloads: mlp, cnn, vgg-mini, gpt-mini, resnet50)");
  return out;
}

// Synthetic minibatch: N(0,1) images or uniform tokens, uniform labels.
struct SyntheticBatch {
  Tensor inputs, labels;
};

SyntheticBatch synthetic_batch(const Model& m, int64_t batch, uint64_t seed) {
  Shape in_shape{batch};
  in_shape.insert(in_shape.end(), m.input_shape.begin(), m.input_shape.end());
  Shape label_shape{batch};
  const Shape per_sample_labels = m.label_shape();
  label_shape.insert(label_shape.end(), per_sample_labels.begin(), per_sample_labels.end());

  SyntheticBatch b;
  const CounterRng data_rng(seed, 0xDA7A, 0), label_rng(seed, 0xDA7A, 1);
  if (m.input_dtype == DType::I32) {
    b.inputs = Tensor::empty(in_shape, DType::I32);
    auto* p = b.inputs.data<int32_t>();
    for (int64_t i = 0; i < b.inputs.numel(); ++i) p[i] = static_cast<int32_t>(data_rng.bits(i) % m.classes);
  } else {
    b.inputs = Tensor::empty(in_shape);
    float* p = b.inputs.f32();
    for (int64_t i = 0; i < b.inputs.numel(); ++i) p[i] = data_rng.normal(i);
  }
  b.labels = Tensor::empty(label_shape, DType::I32);
  auto* l = b.labels.data<int32_t>();
  for (int64_t i = 0; i < b.labels.numel(); ++i) l[i] = static_cast<int32_t>(label_rng.bits(i) % m.classes);
  return b;
}

// CPU time of the whole process (all threads). At one thread it is the
// step's cost without the time other processes held the core, so it stays
// steady on a loaded machine where wall time does not.
double process_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e3 + static_cast<double>(t.tv_nsec) * 1e-6;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The median step's lines: the workload's, then with --op-times one line
// per DeviceOps entry over as many steps again, timed per entry
// (core/op_times.h) - those steps are slower by the timing's events and
// not in the median.
std::vector<nlohmann::json> run_workload(const Model& m, const CoreWorkload& w, const CoreOptions& o, Device device) {
  ParameterStore weights = ParameterStore::create(m, o.seed, device);
  ParameterStore grads = weights.zeros_like_params();
  OptimizerConfig oc;
  oc.kind = OptimizerKind::sgd;
  oc.lr = 0.01f;
  oc.momentum = 0.9f;
  const auto optimizer = make_optimizer(oc);
  OptimizerState opt_state = optimizer->make_state(weights.all_params());
  SyntheticBatch b = synthetic_batch(m, w.batch, o.seed);
  if (device.is_cuda()) b.inputs = b.inputs.to(device);
  const int last = m.size() - 1;

  float loss = 0;
  auto one_step = [&](int s) {
    grads.zero_params();
    StepInfo step{.training = true, .seed = o.seed, .layer_index = 0, .minibatch_id = static_cast<uint64_t>(s),
                  .precision = o.precision, .output_to_loss = true};
    RangeContext ctx;
    Tensor logits = forward_layers(m, weights, 0, last, b.inputs, step, ctx);
    const LossResult r = softmax_cross_entropy(std::move(logits), b.labels);
    backward_layers(m, weights, grads, 0, last, r.grad, step, ctx, false);
    optimizer->step(weights.all_params(), grads.all_params(), opt_state, oc.lr);
    loss = r.loss;
  };
  std::vector<double> step_ms, step_cpu_ms;
  for (int s = 0; s < o.warmup + o.steps; ++s) {
    synchronize_device(device);
    const double c0 = process_cpu_ms();
    const auto t0 = std::chrono::steady_clock::now();
    one_step(s);
    synchronize_device(device);
    const auto t1 = std::chrono::steady_clock::now();
    const double c1 = process_cpu_ms();
    if (s < o.warmup) continue;
    step_ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
    step_cpu_ms.push_back(c1 - c0);
  }
  const double med = median(step_ms);
  const double min = *std::min_element(step_ms.begin(), step_ms.end());
  const bool bf16_storage = o.precision == Precision::BF16 && uses_bf16_storage(device_ops(device));
  std::vector<nlohmann::json> lines{{{"suite", "core"},
          {"workload", w.name},
          {"batch", w.batch},
          {"threads", o.threads},
          {"device", device.str()},
          {"precision", to_string(o.precision)},
          {"bf16_storage", bf16_storage},
          {"allow_tf32", o.allow_tf32},
          {"parameters", m.parameter_count()},
          {"warmup", o.warmup},
          {"steps", o.steps},
          {"median_step_ms", med},
          {"min_step_ms", min},
          {"median_step_cpu_ms", median(step_cpu_ms)},
          {"samples_per_s", static_cast<double>(w.batch) * 1000.0 / med},
          {"final_loss", loss}}};
  if (!o.op_times) return lines;
  synchronize_device(device);
  start_op_timing();
  for (int s = 0; s < o.steps; ++s) one_step(o.warmup + o.steps + s);
  const std::vector<OpTime> times = stop_op_timing();
  double total = 0;
  for (const OpTime& t : times) total += t.ms;
  for (const OpTime& t : times)
    lines.push_back({{"suite", "core_ops"},
                     {"workload", w.name},
                     {"batch", w.batch},
                     {"device", device.str()},
                     {"precision", to_string(o.precision)},
                     {"bf16_storage", bf16_storage},
                     {"allow_tf32", o.allow_tf32},
                     {"op", t.op},
                     {"calls_per_step", static_cast<double>(t.calls) / o.steps},
                     {"ms_per_step", t.ms / o.steps},
                     {"share_of_ops", total > 0 ? t.ms / total : 0.0},
                     {"median_step_ms", med}});
  return lines;
}

void run_core_with(const CoreOptions& o);

void run_core(const CoreOptions& o) {
  if (o.threads < 1) throw UserError(cat("--threads must be at least 1, got ", o.threads));
  if (o.warmup < 0) throw UserError(cat("--warmup must not be negative, got ", o.warmup));
  if (o.steps < 1) throw UserError(cat("--steps must be at least 1, got ", o.steps));
  if (o.batch < 0) throw UserError(cat("--batch must be positive (or 0 for each workload's own), got ", o.batch));
  const std::optional<Precision> precision = parse_precision(o.precision_flag);
  if (!precision) throw UserError(cat("--precision ", o.precision_flag, ": use fp32 or bf16"));
  CoreOptions opts = o;
  opts.precision = *precision;
  run_core_with(opts);
}

// The process's settings (core/compute_settings.h), applied once.
Device apply_core_settings(const CoreOptions& o) {
  const Device device = resolve_compute_device(o.device);
  apply_compute_settings({.device = device, .threads = o.threads, .precision = o.precision,
                          .deterministic = o.deterministic, .allow_tf32 = o.allow_tf32});
  return device;
}

void run_core_with(const CoreOptions& o) {
  if (!o.model.empty()) {
    // Any model: the same step, one line; "workload" is the model's name,
    // "model" / "model_options" what was asked for.
    if (o.batch == 0) throw UserError("--model needs --batch B");
    const Model m = resolve_model(o.model, "", o.model_options);
    const Device device = apply_core_settings(o);
    for (nlohmann::json& line : run_workload(m, {m.name, o.batch}, o, device)) {
      line["model"] = o.model;
      line["model_options"] = o.model_options;
      std::cout << line.dump() << std::endl;
    }
    return;
  }
  if (!o.model_options.empty()) throw UserError("--model-options needs --model");
  std::vector<CoreWorkload> selected = select_workloads(o.workloads);
  if (o.batch > 0)
    for (CoreWorkload& w : selected) w.batch = o.batch;
  const Device device = apply_core_settings(o);
  for (const CoreWorkload& w : selected)
    for (const nlohmann::json& line : run_workload(resolve_model(w.name), w, o, device))
      std::cout << line.dump() << std::endl;
}

}  // namespace

void add_core_suite(CLI::App& app) {
  auto* cmd = app.add_subcommand("core", "training-step throughput (forward+backward+SGD step) per zoo workload");
  auto o = std::make_shared<CoreOptions>();
  cmd->add_option("--threads", o->threads, "compute threads (OpenBLAS and OpenMP)")->capture_default_str();
  auto* workloads =
      cmd->add_option("--workloads", o->workloads, "comma-separated subset of mlp,cnn,vgg-mini,gpt-mini,resnet50")
          ->capture_default_str();
  cmd->add_option("--model", o->model,
                  "time this model instead of the workloads: a zoo name, a spec .json or an .onnx file (needs --batch)")
      ->excludes(workloads);
  cmd->add_option("--model-options", o->model_options, "zoo model options for --model, e.g. image_size=64,classes=10");
  cmd->add_option("--warmup", o->warmup, "untimed steps per workload")->capture_default_str();
  cmd->add_option("--steps", o->steps, "timed steps per workload (the median is reported)")->capture_default_str();
  cmd->add_option("--device", o->device, "cpu | cuda | cuda:N")->capture_default_str();
  cmd->add_option("--batch", o->batch, "batch size for every selected workload (default: each workload's own)");
  cmd->add_flag("--deterministic", o->deterministic, "GPU: deterministic cuDNN convolution algorithms only");
  cmd->add_flag("--allow-tf32", o->allow_tf32,
                "GPU: TF32 tensor cores for FP32 matrix multiplies and convolutions (refused with --device cpu)");
  cmd->add_option("--seed", o->seed, "seed of the initial weights and synthetic data")->capture_default_str();
  cmd->add_option("--precision", o->precision_flag, "fp32 | bf16 (mixed precision)")->capture_default_str();
  cmd->add_flag("--op-times", o->op_times,
                "then as many steps again with each DeviceOps entry timed: a \"core_ops\" line per entry");
  cmd->callback([o] { run_core(*o); });
}

}  // namespace pd::bench
