#include "profiler/measure.h"

#include <malloc.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>

#include "core/bf16_rounding.h"
#include "core/compute_settings.h"
#include "core/cpu/host_allocator.h"
#include "core/device_ops.h"
#include "core/cuda_plugin.h"
#include "core/error.h"
#include "core/loss.h"
#include "core/rng.h"
#include "core/text.h"
#include "models/layer_range.h"
#include "models/model_graph.h"
#include "models/parameters.h"

namespace pd {
namespace {

using Clock = std::chrono::steady_clock;

// The clock, read after the device finished the work queued so far: GPU
// kernels run asynchronously, so an unsynchronised read would time the
// launches, not the layer.
Device g_timed_device;
Clock::time_point now_synced() {
  synchronize_device(g_timed_device);
  return Clock::now();
}

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

}  // namespace

void check_profile_options(const ProfileOptions& o) {
  if (o.batch < 1) throw UserError(cat("--batch must be >= 1, got ", o.batch));
  if (o.iters < 1) throw UserError(cat("--iters must be >= 1, got ", o.iters));
  if (o.warmup < 0) throw UserError(cat("--warmup must be >= 0, got ", o.warmup));
  if (!(o.min_seconds >= 0) || !std::isfinite(o.min_seconds))
    throw UserError(cat("--min-time must be a number of seconds >= 0, got ", o.min_seconds));
  if (o.threads < 0 || o.threads > kMaxComputeThreads)
    throw UserError(cat("--threads must be in [1, ", kMaxComputeThreads, "] (or 0 for all cores), got ", o.threads));
  for (size_t i = 0; i < o.microbatches.size(); ++i) {
    const int m = o.microbatches[i];
    if (m < 2 || o.batch % m != 0)
      throw UserError(cat("--microbatches: ", m, " does not split the batch of ", o.batch,
                          " into equal microbatches (give counts >= 2 that divide it)"));
    if (std::count(o.microbatches.begin(), o.microbatches.begin() + i, m))
      throw UserError(cat("--microbatches: ", m, " is given twice"));
  }
  make_optimizer(o.optimizer);  // UserError for an unknown kind
  // A CPU-only build, a plugin that does not load, no GPU, a bad index.
  require_compute_device(o.device.str());
}

namespace {

// Random inputs and labels of the model's shapes: costs do not depend on
// the values (no data-dependent kernels), only on shapes.
struct SyntheticBatch {
  Tensor inputs, labels;
};

SyntheticBatch make_batch(const Model& m, int64_t batch, uint64_t seed) {
  Shape in = m.input_shape;
  in.insert(in.begin(), batch);
  Shape lab = m.label_shape();
  lab.insert(lab.begin(), batch);
  CounterRng rng(seed, 0xFFFFFFF0u, 0);
  SyntheticBatch b;
  if (m.input_dtype == DType::I32) {
    std::vector<int32_t> tokens(static_cast<size_t>(shape_numel(in)));
    for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(rng.bits(i) % uint64_t(m.classes));
    b.inputs = Tensor::from_ints(tokens, in);
  } else {
    std::vector<float> x(static_cast<size_t>(shape_numel(in)));
    for (size_t i = 0; i < x.size(); ++i) x[i] = rng.normal(i);
    b.inputs = Tensor::from_floats(x, in);
  }
  CounterRng label_rng(seed, 0xFFFFFFF1u, 0);
  std::vector<int32_t> labels(static_cast<size_t>(shape_numel(lab)));
  for (size_t i = 0; i < labels.size(); ++i)
    labels[i] = static_cast<int32_t>(label_rng.bits(i) % uint64_t(m.classes));
  b.labels = Tensor::from_ints(labels, lab);
  return b;
}

struct LayerFacts {
  uint64_t output_bytes = 0, saved_bytes = 0, workspace_bytes = 0;
  uint64_t weight_pass_bytes = 0;  // ProfileNode::weight_pass_bytes
  uint64_t forward_workspace_bytes = 0;  // ProfileNode::forward_workspace_bytes
  uint64_t shared_activation_bytes = 0;  // ProfileNode::shared_activation_bytes
  std::optional<uint64_t> weight_workspace_bytes;  // ProfileNode::weight_workspace_bytes
};

// What a layer call allocates beyond what was live when it started (the
// allocator's peak over its level before the call).
class WorkspaceMeter {
 public:
  explicit WorkspaceMeter(Allocator& a) : a_(a), before_(a.current_bytes()) { a_.reset_peak(); }
  uint64_t bytes() const { return a_.peak_bytes() > before_ ? a_.peak_bytes() - before_ : 0; }
  // The peak above what is still live now: a forward's temporaries, not the
  // context it keeps or its output (activation_bytes, and the next layer's
  // input or the stage's boundary: counted once there).
  uint64_t transient() const { return a_.peak_bytes() > a_.current_bytes() ? a_.peak_bytes() - a_.current_bytes() : 0; }

 private:
  Allocator& a_;
  size_t before_;
};

struct StepTimes {
  std::vector<double> forward_ms, backward_ms;  // per layer
};

// One training step, layer by layer, with a clock read between layers. It
// does what forward_layers + loss + backward_layers do (same arguments,
// same order of frees), so its pieces add up to the uninstrumented step.
StepTimes timed_layer_step(const Model& m, const ParameterStore& w, ParameterStore& grads,
                           const SyntheticBatch& b, const StepInfo& step, std::vector<LayerFacts>* facts,
                           UnitClock* units) {
  const int n = m.size();
  if (units) units->clear();
  UnitClock::Installed timing_units(units);
  StepTimes t;
  t.forward_ms.resize(static_cast<size_t>(n));
  t.backward_ms.resize(static_cast<size_t>(n));
  std::vector<LayerContext> ctx(static_cast<size_t>(n));
  // bf16: the rounding points of forward_layers / backward_layers, timed with their layer.
  const Precision precision = step.precision;
  std::vector<Tensor> rounded;
  Tensor h = rounded_copy_if_bf16(precision, b.inputs);
  Allocator& allocator = allocator_for(b.inputs.device());
  Clock::time_point start = now_synced();
  bool exact = true;
  for (int i = 0; i < n; ++i) {
    std::optional<WorkspaceMeter> meter;
    if (facts) meter.emplace(allocator);
    ForwardArgs a{operand_params(precision, w.params(i), rounded), w.buffers(i), step};
    a.step.layer_index = static_cast<uint32_t>(i);
    a.step.output_to_loss = i == n - 1;  // as forward_layers does for the trainer
    // Its input stays alive until the facts are taken: a stage may keep it
    // (a recomputed layer does), so it is not this layer's working memory.
    Tensor input = facts ? h : Tensor();
    h = m.layer(i).forward(a, h, ctx[static_cast<size_t>(i)]);
    exact = round_layer_output_if_bf16(precision, m.layer(i), i + 1 < n ? &m.layer(i + 1) : nullptr,
                                       ctx[static_cast<size_t>(i)], h, exact);
    Clock::time_point end = now_synced();
    t.forward_ms[static_cast<size_t>(i)] = ms_between(start, end);
    if (facts) {
      const LayerContext& c = ctx[static_cast<size_t>(i)];
      (*facts)[static_cast<size_t>(i)] = {h.nbytes(), saved_bytes_beyond_params(c, a.params), meter->transient(), 0,
                                          meter->transient() + (h.same_storage(input) ? 0 : h.nbytes()),
                                          i > 0 ? saved_bytes_shared_with(c, ctx[static_cast<size_t>(i - 1)]) : 0};
      input = Tensor();
    }
    start = now_synced();
  }
  // The loss belongs to the last stage's backward: it starts when the
  // logits are there and produces the gradient the last layer consumes.
  Tensor g = rounded_copy_if_bf16(precision, softmax_cross_entropy(std::move(h), b.labels).grad);
  // As in backward_layers on a first stage: no layer below the lowest one
  // with parameters runs backward, and that one computes no input gradient.
  const int lowest = first_layer_with_params(m, 0, n - 1);
  for (int i = n - 1; i >= 0; --i) {
    if (i < lowest) {
      ctx[static_cast<size_t>(i)].clear();
      t.backward_ms[static_cast<size_t>(i)] = 0.0;
      continue;
    }
    std::optional<WorkspaceMeter> meter;
    const uint64_t received = g.nbytes();  // the gradient it receives is working memory too
    if (facts) meter.emplace(allocator);
    BackwardArgs a{operand_params(precision, w.params(i), rounded), grads.params(i), step, i > lowest};
    a.step.layer_index = static_cast<uint32_t>(i);
    LayerContext& c = ctx[static_cast<size_t>(i)];
    if (facts && m.layer(i).defers_weight_gradient()) {
      // The same kernels in the same order as backward (SplitBackwardLayer),
      // with what B leaves for W weighed between them.
      g = m.layer(i).backward_input(a, g, c);
      LayerFacts& f = (*facts)[static_cast<size_t>(i)];
      f.weight_pass_bytes = saved_bytes_beyond_params(c, a.params);
      // W's own working memory: what it allocates beyond what B left (its
      // context is held already). A second meter restarts the peak, so the
      // first one's reading so far is kept.
      const uint64_t b_bytes = meter->bytes();
      {
        const WorkspaceMeter w_meter(allocator);
        m.layer(i).backward_weights(a, c);
        f.weight_workspace_bytes = w_meter.bytes();
      }
      f.workspace_bytes = std::max(f.workspace_bytes, received + b_bytes);
    } else {
      g = m.layer(i).backward(a, g, c);
    }
    round_layer_input_grad_if_bf16(precision, m.layer(i), g);
    if (facts) {
      uint64_t& ws = (*facts)[static_cast<size_t>(i)].workspace_bytes;
      ws = std::max(ws, received + meter->bytes());
    }
    ctx[static_cast<size_t>(i)].clear();
    Clock::time_point end = now_synced();
    t.backward_ms[static_cast<size_t>(i)] = ms_between(start, end);
    start = now_synced();
  }
  return t;
}

// The uninstrumented step, as the trainer runs it.
double timed_whole_step(const Model& m, const ParameterStore& w, ParameterStore& grads, const SyntheticBatch& b,
                        const StepInfo& step) {
  const int last = m.size() - 1;
  Clock::time_point start = now_synced();
  {
    RangeContext ctx;
    StepInfo to_loss = step;
    to_loss.output_to_loss = true;
    Tensor logits = forward_layers(m, w, 0, last, b.inputs, to_loss, ctx);
    Tensor g = softmax_cross_entropy(std::move(logits), b.labels).grad;
    backward_layers(m, w, grads, 0, last, g, step, ctx, false);
  }
  return ms_between(start, now_synced());
}

double median(const std::vector<double>& v) { return sample_median(v); }
double p90(const std::vector<double>& v) { return sample_p90(v); }

uint64_t parameter_bytes(const ParameterStore& w, int layer) {
  uint64_t n = 0;
  for (const Tensor& p : w.params(layer)) n += p.nbytes();
  return n;
}

// Both timings of one iteration; which runs first alternates so neither
// always inherits the other's warm caches.
struct IterationTimes {
  StepTimes layers;
  double whole_ms = 0;
};

IterationTimes time_iteration(const Model& m, const ParameterStore& w, ParameterStore& grads, const SyntheticBatch& b,
                              uint64_t seed, Precision precision, int it, std::vector<LayerFacts>* facts,
                              UnitClock* units) {
  StepInfo step;
  step.training = true;
  step.seed = seed;
  step.precision = precision;
  step.minibatch_id = static_cast<uint64_t>(it);
  IterationTimes t;
  for (int k = 0; k < 2; ++k) {
    grads.zero_params();
    if ((k == 0) == (it % 2 == 0)) t.layers = timed_layer_step(m, w, grads, b, step, facts, units);
    else t.whole_ms = timed_whole_step(m, w, grads, b, step);
  }
  return t;
}

// A fixed piece of work timed once per measured iteration, outside the
// layer timings: how fast this host ran while the profile was measured. On
// a shared VM the host's speed moves in phases of seconds to minutes
// (another tenant on the core's SMT sibling, frequency), and every layer
// moves with it; two profiles whose probes differ by 15% were taken on a
// machine running 15% apart. A 256^3 GEMM on the compute threads: the kind
// of work the layers do, about half a millisecond on one core.
class HostProbe {
 public:
  HostProbe() : a_(kN * kN, 1.0f), b_(kN * kN, 0.5f), c_(kN * kN) {}
  double time_ms() {
    std::vector<double> runs;
    for (int k = 0; k < 5; ++k) {
      const Clock::time_point start = Clock::now();
      cpu_gemm_(false, false, kN, kN, kN, 1.0f, a_.data(), kN, b_.data(), kN, 0.0f, c_.data(), kN);
      runs.push_back(ms_between(start, Clock::now()));
    }
    return sample_median(std::move(runs));
  }

 private:
  static constexpr int64_t kN = 256;
  decltype(DeviceOps::gemm) cpu_gemm_ = device_ops(Device::cpu()).gemm;
  std::vector<float> a_, b_, c_;
};

// The measured iterations' times, per layer and whole.
struct Samples {
  std::vector<std::vector<double>> fwd, bwd;
  std::vector<double> whole, instrumented;  // instrumented: the layer times summed per iteration
  std::vector<double> host_probe;           // HostProbe, CPU only
  std::vector<double> optimizer;            // the whole model's optimizer step
  std::vector<std::vector<double>> unit_fwd, unit_bwd;  // models with a graph: per unit
  explicit Samples(size_t layers, size_t units) : fwd(layers), bwd(layers), unit_fwd(units), unit_bwd(units) {}
  void add_units(const UnitClock& c) {
    for (size_t u = 0; u < unit_fwd.size(); ++u) {
      unit_fwd[u].push_back(c.forward_ms[u]);
      unit_bwd[u].push_back(c.backward_ms[u]);
    }
  }
  void add(const IterationTimes& t) {
    double sum = 0;
    for (size_t i = 0; i < fwd.size(); ++i) {
      fwd[i].push_back(t.layers.forward_ms[i]);
      bwd[i].push_back(t.layers.backward_ms[i]);
      sum += t.layers.forward_ms[i] + t.layers.backward_ms[i];
    }
    whole.push_back(t.whole_ms);
    instrumented.push_back(sum);
  }
};

// One profile node per graph unit: its time is its share, by the unit
// clock's medians, of its layer's measured time (so the units of a layer
// add up to it, the interpreter's own work spread over them); edges are the
// graph's. Layer-level facts a unit cannot have alone: the layer's working
// memory (an upper bound for each of its units).
Profile unit_profile(Profile layers, const ModelGraph& g, const Samples& s, const std::vector<uint64_t>& saved_bytes,
                     int optimizer_slots) {
  const size_t U = g.units.size();
  std::vector<double> fwd(U), bwd(U), sum_fwd(layers.nodes.size(), 0), sum_bwd(layers.nodes.size(), 0);
  std::vector<int> count(layers.nodes.size(), 0);
  for (size_t u = 0; u < U; ++u) {
    const size_t l = static_cast<size_t>(g.units[u].layer);
    PD_CHECK(l < layers.nodes.size(), "unit ", u, " in layer ", l, " of ", layers.nodes.size());
    fwd[u] = median(s.unit_fwd[u]), bwd[u] = median(s.unit_bwd[u]);
    sum_fwd[l] += fwd[u], sum_bwd[l] += bwd[u], ++count[l];
  }
  auto share = [](double unit, double sum, int n, double layer) { return sum > 0 ? layer * unit / sum : layer / n; };
  std::vector<ProfileNode> nodes;
  for (size_t u = 0; u < U; ++u) {
    const ModelGraphUnit& unit = g.units[u];
    const ProfileNode& layer = layers.nodes[static_cast<size_t>(unit.layer)];
    const size_t l = static_cast<size_t>(unit.layer);
    ProfileNode node;
    node.id = static_cast<int>(u);
    node.name = unit.name;
    node.op = unit.op;
    node.forward_ms = share(fwd[u], sum_fwd[l], count[l], layer.forward_ms);
    node.backward_ms = share(bwd[u], sum_bwd[l], count[l], layer.backward_ms);
    node.forward_p90_ms = sum_fwd[l] > 0 ? p90(s.unit_fwd[u]) * layer.forward_ms / sum_fwd[l] : node.forward_ms;
    node.backward_p90_ms = sum_bwd[l] > 0 ? p90(s.unit_bwd[u]) * layer.backward_ms / sum_bwd[l] : node.backward_ms;
    node.output_bytes = unit.output_bytes_per_sample * static_cast<uint64_t>(layers.batch_size);
    node.activation_bytes = u < saved_bytes.size() ? saved_bytes[u] : 0;
    node.workspace_bytes = layer.workspace_bytes;
    node.forward_workspace_bytes = layer.forward_workspace_bytes;
    node.parameter_bytes = unit.parameter_bytes;
    node.optimizer_state_bytes = node.parameter_bytes * static_cast<uint64_t>(optimizer_slots);
    nodes.push_back(std::move(node));
  }
  layers.nodes = std::move(nodes);
  layers.edges = g.edges;
  return layers;
}

}  // namespace

namespace {

// bf16: activations travel as bf16, 2 bytes an element where the
// measurement counted 4 (outputs are F32 tensors of bf16 values, packed on
// the host to send). A CPU stage also keeps its stash packed; a GPU keeps
// saved tensors as F32 of bf16 values (no native bf16 storage yet), so there
// the saved bytes stay as measured. The few FP32 statistics and int32
// indices a CPU layer saves are counted at half too, a small overestimate.
void record_precision(Profile& p, Precision precision, Device device) {
  p.precision = precision;
  if (precision == Precision::FP32) return;
  for (ProfileNode& node : p.nodes) {
    node.output_bytes /= 2;
    if (device.is_cpu()) node.activation_bytes /= 2, node.weight_pass_bytes /= 2;
  }
}

// A layer's synthetic input at `batch`: its recorded per-sample shape,
// token ids below the model's classes for an integer input, else normal.
Tensor synthetic_input(const Model& m, int i, int64_t batch, uint64_t seed) {
  Shape shape = m.layers[static_cast<size_t>(i)].input_shape;
  shape.insert(shape.begin(), batch);
  CounterRng rng(seed, 0xFFFFFFF2u, static_cast<uint32_t>(i));
  if ((i == 0 ? m.input_dtype : m.layer(i).input_dtype()) == DType::I32) {
    std::vector<int32_t> tokens(static_cast<size_t>(shape_numel(shape)));
    for (size_t k = 0; k < tokens.size(); ++k) tokens[k] = static_cast<int32_t>(rng.bits(k) % uint64_t(m.classes));
    return Tensor::from_ints(tokens, shape);
  }
  std::vector<float> x(static_cast<size_t>(shape_numel(shape)));
  for (size_t k = 0; k < x.size(); ++k) x[k] = rng.normal(k);
  return Tensor::from_floats(x, shape);
}

// What one layer built alone costs: forward and backward times per
// iteration, its facts, its optimizer step.
struct LayerAlone {
  std::vector<double> forward_ms, backward_ms, optimizer_ms;
  LayerFacts facts;
};

// --memory: layer i alone, its weights, gradients and optimizer state
// allocated here and freed on return.
LayerAlone time_layer_alone(const Model& m, int i, const ProfileOptions& o, const Tensor& labels, UnitClock* units,
                            Samples& samples, std::vector<uint64_t>& unit_saved_bytes) {
  const int n = m.size();
  const Layer& layer = m.layer(i);
  ParameterStore w = ParameterStore::create(m, i, i, o.seed, o.device);
  ParameterStore grads = w.zeros_like_params();
  const auto optimizer = make_optimizer(o.optimizer);
  OptimizerState state = optimizer->make_state(w.all_params());
  Tensor x = synthetic_input(m, i, o.batch, o.seed);
  if (o.device.is_cuda()) x = x.to(o.device);
  Tensor upstream;  // the gradient a middle layer receives: synthetic, of its output's shape
  if (i + 1 < n) {
    Shape out = m.layers[static_cast<size_t>(i)].output_shape;
    out.insert(out.begin(), o.batch);
    upstream = Tensor::full(out, 1e-3f, o.device);
  }
  const bool input_grad = i > first_layer_with_params(m, 0, n - 1);
  const bool below_params = i < first_layer_with_params(m, 0, n - 1);
  Allocator& allocator = allocator_for(o.device);
  LayerAlone r;
  std::vector<Tensor> rounded;
  for (int it = 0; it < o.warmup + o.iters; ++it) {
    StepInfo step;
    step.training = true;
    step.seed = o.seed;
    step.precision = o.precision;
    step.minibatch_id = static_cast<uint64_t>(it);
    step.layer_index = static_cast<uint32_t>(i);
    step.output_to_loss = i == n - 1;
    if (units) units->clear();
    UnitClock::Installed timing_units(units);
    LayerContext ctx;
    std::optional<WorkspaceMeter> meter;
    if (it == 0) meter.emplace(allocator);
    Clock::time_point start = now_synced();
    const ForwardArgs args{operand_params(o.precision, w.params(i), rounded), w.buffers(i), step};
    Tensor h = layer.forward(args, rounded_copy_if_bf16(o.precision, x), ctx);
    const double forward_ms = ms_between(start, now_synced());
    if (it == 0)
      r.facts = {h.nbytes(), saved_bytes_beyond_params(ctx, args.params), meter->bytes(), 0,
                 meter->transient() + h.nbytes()};
    Tensor g = i + 1 < n ? upstream.clone() : softmax_cross_entropy(std::move(h), labels).grad;
    h = Tensor();
    double backward_ms = 0;
    if (!below_params) {
      if (it == 0) meter.emplace(allocator);
      const uint64_t received = g.nbytes();
      start = now_synced();
      g = layer.backward(BackwardArgs{operand_params(o.precision, w.params(i), rounded), grads.params(i), step, input_grad},
                         g, ctx);
      backward_ms = ms_between(start, now_synced());
      if (it == 0) r.facts.workspace_bytes = std::max(r.facts.workspace_bytes, received + meter->bytes());
    }
    ctx.clear();
    if (units && it == 0)
      for (size_t u = 0; u < units->saved_bytes.size(); ++u)
        if (m.graph->units[u].layer == i) unit_saved_bytes[u] = units->saved_bytes[u];
    if (it < o.warmup) continue;
    r.forward_ms.push_back(forward_ms);
    r.backward_ms.push_back(backward_ms);
    if (units) {
      for (size_t u = 0; u < units->forward_ms.size(); ++u)
        if (m.graph->units[u].layer == i) {
          samples.unit_fwd[u].push_back(units->forward_ms[u]);
          samples.unit_bwd[u].push_back(units->backward_ms[u]);
        }
    }
    const Clock::time_point step_start = now_synced();
    optimizer->step(w.all_params(), grads.all_params(), state, 0.0f);
    grads.zero_params();
    r.optimizer_ms.push_back(ms_between(step_start, now_synced()));
  }
  return r;
}

// --memory: every layer alone, one after the other (see ProfileOptions).
Profile measure_one_layer_at_a_time(const Model& model, const ProfileOptions& o, MeasureDetails* details) {
  const int n = model.size();
  const int slots = make_optimizer(o.optimizer)->slots_per_param();
  for (int i = 0; i < n; ++i) {
    const uint64_t weights = uint64_t(model.parameter_count(i, i)) * sizeof(float), state = weights * uint64_t(2 + slots);
    if (state > o.memory_bytes)
      throw UserError(cat("layer ", i, " (", model.layers[size_t(i)].name, ") alone needs ", bytes_text(double(state)),
                          " for its weights, gradients and optimizer state, more than --memory ",
                          bytes_text(double(o.memory_bytes)), "; profile holds one layer at a time, no less"));
  }
  std::optional<UnitClock> units;
  if (model.graph && o.device.is_cpu()) units.emplace(model.graph->units.size());
  Samples samples(static_cast<size_t>(n), units ? model.graph->units.size() : 0);
  const Tensor labels = make_batch(model, o.batch, o.seed).labels;
  std::vector<LayerAlone> layers;
  std::vector<uint64_t> unit_saved_bytes(units ? model.graph->units.size() : 0, 0);
  Clock::time_point since = Clock::now();
  for (int i = 0; i < n; ++i) {
    layers.push_back(time_layer_alone(model, i, o, labels, units ? &*units : nullptr, samples, unit_saved_bytes));
    // The freed layer's blocks go back to the system, not to the allocator's
    // cache or malloc's free lists (where the next layer's other sizes would
    // sit beside them).
    if (o.device.is_cpu()) {
      cpu::release_host_cache();
      ::malloc_trim(0);
    }
    if (o.progress) {
      ProfileProgress p;
      p.batch = o.batch;
      p.iteration = i + 1;
      p.iterations = n;
      p.elapsed_s = std::chrono::duration<double>(Clock::now() - since).count();
      p.last = i + 1 == n;
      o.progress(p);
    }
  }
  // Iteration k of the step: the sum of every layer's k-th times.
  std::vector<double> sums(static_cast<size_t>(o.iters), 0.0);
  for (const LayerAlone& l : layers)
    for (size_t k = 0; k < sums.size(); ++k) sums[k] += l.forward_ms[k] + l.backward_ms[k];
  if (details) *details = {sums, sums, {}};
  Profile p;
  p.source_kind = ProfileSource::json;
  p.model = model.name;
  p.device = o.device.str();
  p.dtype = "f32";
  p.batch_size = static_cast<int>(o.batch);
  p.threads = compute_threads();
  p.step_forward_backward_ms = median(sums);
  p.warmup_iterations = o.warmup;
  p.measured_iterations = o.iters;
  p.measured_seconds = std::chrono::duration<double>(Clock::now() - since).count();
  for (int i = 0; i < n; ++i) {
    const LayerAlone& l = layers[static_cast<size_t>(i)];
    ProfileNode node;
    node.id = i;
    node.name = model.layers[static_cast<size_t>(i)].name;
    node.op = model.layer(i).type();
    node.forward_ms = median(l.forward_ms);
    node.backward_ms = median(l.backward_ms);
    node.forward_p90_ms = p90(l.forward_ms);
    node.backward_p90_ms = p90(l.backward_ms);
    node.output_bytes = l.facts.output_bytes;
    node.activation_bytes = l.facts.saved_bytes;
    node.workspace_bytes = l.facts.workspace_bytes;
    node.forward_workspace_bytes = l.facts.forward_workspace_bytes;
    node.parameter_bytes = uint64_t(model.parameter_count(i, i)) * sizeof(float);
    node.optimizer_ms = median(l.optimizer_ms);
    node.optimizer_state_bytes = node.parameter_bytes * static_cast<uint64_t>(slots);
    p.nodes.push_back(std::move(node));
    if (i + 1 < n) p.edges.emplace_back(i, i + 1);
  }
  if (units) {
    // The optimizer's time per unit: its layer's, shared by parameter bytes.
    const Profile per_layer = p;
    p = unit_profile(std::move(p), *model.graph, samples, unit_saved_bytes, slots);
    for (ProfileNode& node : p.nodes) {
      const ProfileNode& layer = per_layer.nodes[size_t(model.graph->units[size_t(node.id)].layer)];
      node.optimizer_ms =
          layer.parameter_bytes ? layer.optimizer_ms * double(node.parameter_bytes) / double(layer.parameter_bytes) : 0.0;
    }
  }
  record_precision(p, o.precision, o.device);
  return p;
}

// The profile records the process's compute settings (applied once by the
// command, core/compute_settings.h): they must be what the options ask for.
void require_applied_settings(const ProfileOptions& o) {
  const int threads = threads_or_all_cores(o.threads);
  if (threads != compute_threads())
    throw RuntimeFailure(cat("a profile with ", threads, " compute threads in a process that computes with ",
                             compute_threads(), ": apply_compute_settings with the profile's options first"));
  if (!o.device.is_cuda()) return;
  const ComputeSettings* s = applied_compute_settings();
  if (!s || s->device != o.device || s->allow_tf32 != o.allow_tf32)
    throw RuntimeFailure(cat("a profile on ", o.device.str(), o.allow_tf32 ? " with TF32" : "",
                             " in a process that has not opened it: apply_compute_settings with the profile's "
                             "options first"));
}

// One batch size, o.microbatches ignored.
Profile measure_at_batch(const Model& model, const ProfileOptions& o, MeasureDetails* details) {
  PD_CHECK(model.size() > 0, "model ", model.name, " has no layers");
  require_applied_settings(o);
  const int slots = make_optimizer(o.optimizer)->slots_per_param();

  const int n = model.size();
  g_timed_device = o.device;
  if (o.memory_bytes > 0) return measure_one_layer_at_a_time(model, o, details);
  ParameterStore w = ParameterStore::create(model, o.seed, o.device);
  ParameterStore grads = w.zeros_like_params();
  SyntheticBatch batch = make_batch(model, o.batch, o.seed);
  // Inputs start where the layers run (labels stay on the host, as the
  // trainer fetches them; the loss copies them).
  if (o.device.is_cuda()) batch.inputs = batch.inputs.to(o.device);

  std::vector<LayerFacts> facts(static_cast<size_t>(n));
  // Imported graphs are profiled per unit, timed inside their layers (CPU).
  std::optional<UnitClock> units;
  if (model.graph && o.device.is_cpu()) units.emplace(model.graph->units.size());
  std::vector<uint64_t> unit_saved_bytes;
  Samples samples(static_cast<size_t>(n), units ? model.graph->units.size() : 0);
  HostProbe probe;
  // The optimizer step, timed after each measured iteration at lr 0 (the
  // weights stay; its state moves as in training), with the clearing of the
  // gradients for the next step that training does with it (a pass over
  // every gradient: 3 of a 64x64 resnet18 last stage's 9.5 ms).
  const auto optimizer = make_optimizer(o.optimizer);
  OptimizerState optimizer_state = optimizer->make_state(w.all_params());
  Clock::time_point measuring_since;
  double measured_seconds = 0;
  for (int it = 0;; ++it) {
    const bool measured = it >= o.warmup;
    if (it == o.warmup) measuring_since = Clock::now();
    UnitClock* clock = units ? &*units : nullptr;
    const IterationTimes t = time_iteration(model, w, grads, batch, o.seed, o.precision, it, it == 0 ? &facts : nullptr, clock);
    if (clock && it == 0) unit_saved_bytes = clock->saved_bytes;
    ProfileProgress p;
    p.batch = o.batch;
    p.warmup = !measured;
    if (measured) {
      samples.add(t);
      if (clock) samples.add_units(*clock);
      const Clock::time_point step_start = now_synced();
      optimizer->step(w.all_params(), grads.all_params(), optimizer_state, 0.0f);
      grads.zero_params();
      samples.optimizer.push_back(ms_between(step_start, now_synced()));
      if (!o.device.is_cuda()) samples.host_probe.push_back(probe.time_ms());
      measured_seconds = std::chrono::duration<double>(Clock::now() - measuring_since).count();
      p.iteration = it - o.warmup + 1;
      p.iterations = o.iters;
      p.elapsed_s = measured_seconds;
      p.last = p.iteration >= o.iters && measured_seconds >= o.min_seconds;
    } else {
      p.iteration = it + 1;
      p.iterations = o.warmup;
      p.last = it + 1 == o.warmup;
    }
    if (o.progress) o.progress(p);
    if (measured && p.last) break;
  }
  if (details) *details = {samples.whole, samples.instrumented, samples.host_probe};

  Profile p;
  p.source_kind = ProfileSource::json;
  p.model = model.name;
  p.device = o.device.str();
  p.dtype = "f32";
  p.batch_size = static_cast<int>(o.batch);
  p.threads = compute_threads();
  p.step_forward_backward_ms = median(samples.whole);
  p.warmup_iterations = o.warmup;
  p.measured_iterations = static_cast<int>(samples.whole.size());
  p.measured_seconds = measured_seconds;
  if (!samples.host_probe.empty()) p.host_probe_ms = median(samples.host_probe);
  // The step is a pass over each parameter and its slots: its time is
  // shared by parameter bytes.
  uint64_t all_parameter_bytes = 0;
  for (int i = 0; i < n; ++i) all_parameter_bytes += parameter_bytes(w, i);
  const double optimizer_ms = median(samples.optimizer);
  auto optimizer_share = [&](uint64_t bytes) {
    return all_parameter_bytes ? optimizer_ms * double(bytes) / double(all_parameter_bytes) : 0.0;
  };
  for (int i = 0; i < n; ++i) {
    const size_t k = static_cast<size_t>(i);
    ProfileNode node;
    node.id = i;
    node.name = model.layers[k].name;
    node.op = model.layer(i).type();
    node.forward_ms = median(samples.fwd[k]);
    node.backward_ms = median(samples.bwd[k]);
    node.forward_p90_ms = p90(samples.fwd[k]);
    node.backward_p90_ms = p90(samples.bwd[k]);
    node.output_bytes = facts[k].output_bytes;
    node.activation_bytes = facts[k].saved_bytes;
    node.workspace_bytes = facts[k].workspace_bytes;
    node.forward_workspace_bytes = facts[k].forward_workspace_bytes;
    node.shared_activation_bytes = facts[k].shared_activation_bytes;
    node.weight_workspace_bytes = facts[k].weight_workspace_bytes;
    node.weight_pass_bytes = facts[k].weight_pass_bytes;
    node.parameter_bytes = parameter_bytes(w, i);
    node.optimizer_ms = optimizer_share(node.parameter_bytes);
    node.optimizer_state_bytes = node.parameter_bytes * static_cast<uint64_t>(slots);
    p.nodes.push_back(std::move(node));
    if (i + 1 < n) p.edges.emplace_back(i, i + 1);
  }
  if (units) {
    p = unit_profile(std::move(p), *model.graph, samples, unit_saved_bytes, slots);
    for (ProfileNode& node : p.nodes) node.optimizer_ms = optimizer_share(node.parameter_bytes);
    for (const ModelGraph::SharedParameter& sp : model.graph->shared_parameters)
      p.ties.push_back({sp.name, sp.bytes, sp.units});
  } else {
    for (const TieGroup& g : model.ties) {
      ProfileTie t{stored_name(g.owner()), w.param(stored_name(g.owner())).nbytes(), {}};
      for (const TiedTensor& m : g.members) t.nodes.push_back(m.layer);
      p.ties.push_back(std::move(t));
    }
  }
  record_precision(p, o.precision, o.device);
  return p;
}

}  // namespace

Profile measure_profile(const Model& model, const ProfileOptions& o, MeasureDetails* details) {
  check_profile_options(o);
  Profile p = measure_at_batch(model, o, details);
  std::vector<int> counts = o.microbatches;
  std::sort(counts.rbegin(), counts.rend());  // ascending microbatch sizes, as at_batch lists them
  for (int m : counts) {
    ProfileOptions at = o;
    at.batch = o.batch / m;
    const Profile q = measure_at_batch(model, at, nullptr);
    PD_CHECK(q.nodes.size() == p.nodes.size(), "profile at batch ", at.batch, " has ", q.nodes.size(), " nodes, at ",
             o.batch, " ", p.nodes.size());
    for (size_t i = 0; i < p.nodes.size(); ++i) {
      PD_CHECK(q.nodes[i].id == p.nodes[i].id, "node ", i, " differs between batch sizes");
      p.nodes[i].at_batch.push_back({static_cast<int>(at.batch), q.nodes[i].forward_ms, q.nodes[i].backward_ms});
    }
  }
  return p;
}

double sample_median(std::vector<double> v) {
  PD_CHECK(!v.empty(), "median of no samples");
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double sample_p90(std::vector<double> v) {
  PD_CHECK(!v.empty(), "percentile of no samples");
  std::sort(v.begin(), v.end());
  size_t rank = static_cast<size_t>(std::ceil(0.9 * static_cast<double>(v.size())));
  return v[std::max<size_t>(rank, 1) - 1];
}

double drift_between_halves(const std::vector<double>& samples) {
  if (samples.size() < 4) return 0;
  const auto half = samples.begin() + static_cast<std::ptrdiff_t>(samples.size() / 2);
  const double first = sample_median({samples.begin(), half}), second = sample_median({half, samples.end()});
  return std::abs(first - second) / std::min(first, second);
}

double layer_time_sum_ms(const Profile& p) {
  double s = 0;
  for (const ProfileNode& n : p.nodes) s += n.forward_ms + n.backward_ms;
  return s;
}

std::string optimizer_state_description(const OptimizerConfig& c) {
  const int slots = make_optimizer(c)->slots_per_param();
  char buf[128];
  if (c.kind == OptimizerKind::sgd) std::snprintf(buf, sizeof buf, "sgd (momentum %g)", double(c.momentum));
  else std::snprintf(buf, sizeof buf, "%s", to_string(c.kind));
  return cat(buf, ": ", slots, slots == 1 ? " slot" : " slots", " per parameter");
}

}  // namespace pd
