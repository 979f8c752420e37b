#include "runtime/auto_plan.h"

#include <algorithm>
#include <chrono>

#include "core/cpu/gemm.h"
#include "core/error.h"
#include "models/layer_range.h"
#include "planner/planner.h"

namespace pd {

namespace {
double ms_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
}  // namespace

Profile measure_layer_profile(const Model& m, int64_t batch, int threads, int repeats) {
  const int saved_threads = cpu::compute_threads();
  cpu::set_compute_threads(threads);
  ParameterStore w = ParameterStore::create(m, 1);
  ParameterStore g = w.zeros_like_params();
  Shape in = m.input_shape;
  in.insert(in.begin(), batch);
  Tensor x = m.input_dtype == DType::F32 ? Tensor::full(in, 0.5f) : Tensor::zeros(in, m.input_dtype);
  Profile p;
  p.model = m.name;
  p.batch_size = static_cast<int>(batch);
  p.threads = threads;
  p.source_kind = "json";
  double total = 0;
  for (int l = 0; l < m.size(); ++l) {
    std::vector<double> fwd, bwd;
    Tensor y;
    size_t saved = 0;
    for (int rep = 0; rep <= repeats; ++rep) {
      RangeContext ctx;
      auto t0 = std::chrono::steady_clock::now();
      y = forward_layers(m, w, l, l, x, {.training = true, .layer_index = 0, .minibatch_id = uint64_t(rep)}, ctx);
      const double f = ms_since(t0);
      saved = ctx.saved_bytes();
      Tensor dy = Tensor::full(y.shape(), 1e-3f);
      t0 = std::chrono::steady_clock::now();
      backward_layers(m, w, g, l, l, dy, {.training = true, .layer_index = 0, .minibatch_id = uint64_t(rep)}, ctx, l > 0);
      const double b = ms_since(t0);
      if (rep > 0) fwd.push_back(f), bwd.push_back(b);  // the first run warms caches up
    }
    ProfileNode n;
    n.id = l;
    n.name = m.layers[static_cast<size_t>(l)].name;
    n.op = m.layer(l).type();
    n.forward_ms = median(fwd);
    n.backward_ms = median(bwd);
    n.output_bytes = y.nbytes();
    n.activation_bytes = saved;
    for (const Tensor& t : w.params(l)) n.parameter_bytes += t.nbytes();
    n.optimizer_state_bytes = n.parameter_bytes;
    total += n.forward_ms + n.backward_ms;
    p.nodes.push_back(n);
    if (l > 0) p.edges.emplace_back(l - 1, l);
    x = y;
  }
  p.step_forward_backward_ms = total;
  cpu::set_compute_threads(saved_threads);
  return p;
}

Plan plan_for_workers(const Profile& p, int workers, bool straight, double bandwidth_GBps) {
  if (workers < 1) throw UserError(cat("--workers must be >= 1, got ", workers));
  if (straight && workers > static_cast<int>(p.nodes.size()))
    throw UserError(cat("--straight with ", workers, " workers needs at least as many layers; ", p.model, " has ",
                        p.nodes.size()));
  PlannerOptions o;
  o.straight = straight;
  Plan plan = plan_pipeline(p, flat_topology(workers, bandwidth_GBps), o);
  plan.profile.model = p.model;
  plan.profile.batch_size = p.batch_size;
  plan.profile.device = p.device;
  return plan;
}

}  // namespace pd
