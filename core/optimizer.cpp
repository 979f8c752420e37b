// SGD, Adam and AdamW with PyTorch's update rules, and the LR schedules.
#include "core/optimizer.h"

#if defined(__AVX__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <utility>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/spelling_table.h"
#include "core/optimizer_on_device.h"

namespace pd {

namespace {

constexpr double kPi = 3.14159265358979323846;

// One table per set: to_string and parse read the same spelling.
constexpr std::array<std::pair<OptimizerKind, const char*>, 3> kOptimizerKinds{
    {{OptimizerKind::sgd, "sgd"}, {OptimizerKind::adam, "adam"}, {OptimizerKind::adamw, "adamw"}}};
constexpr std::array<std::pair<LrScheduleKind, const char*>, 3> kLrScheduleKinds{
    {{LrScheduleKind::constant, "constant"}, {LrScheduleKind::step, "step"}, {LrScheduleKind::cosine, "cosine"}}};

void check_pair(const Tensor& p, const Tensor& g) {
  PD_CHECK(p.device().is_cpu() && g.device().is_cpu(), "CPU optimizer given a device tensor");
  PD_CHECK(p.numel() == g.numel(), "param/grad size mismatch: ", shape_str(p.shape()), " vs ",
           shape_str(g.shape()));
}

void check_into(std::span<const Tensor> from, std::span<Tensor> to, std::span<const Tensor> grads) {
  PD_CHECK(from.size() == grads.size() && to.size() == grads.size(), "params/grads count mismatch");
  for (size_t i = 0; i < to.size(); ++i)
    PD_CHECK(to[i].numel() == from[i].numel() && to[i].device() == from[i].device(),
             "optimizer step into a tensor unlike its source: ", shape_str(to[i].shape()), " vs ",
             shape_str(from[i].shape()));
}

enum class StepKernel { Sgd, Adam };

// A backend with optimizer kernels in its table (DeviceOps::sgd_step_multi,
// adam_step_multi) takes the step; they update in place, so an out-of-place step
// there is a device copy first (cheap next to a GPU's memory bandwidth).
// The CPU's table has none: the host loops below also write straight into
// another weight version.
bool backend_steps_into(std::span<const Tensor> from, std::span<Tensor> to, StepKernel kernel) {
  if (to.empty()) return false;
  const DeviceOps& ops = device_ops(to[0].device());
  if (kernel == StepKernel::Sgd ? !ops.sgd_step_multi : !ops.adam_step_multi) return false;
  for (size_t i = 0; i < to.size(); ++i)
    if (to[i].raw() != from[i].raw()) to[i].copy_from(from[i]);
  return true;
}

// Writes out[k] = new_value(k) for k < n, `out` in place (== p) or not.
// The values are made a chunk at a time in an L1 buffer that aliases
// nothing, so the update loop vectorizes, then stored. Into other buffers (a
// stage keeping the old version) the stores are non-temporal: a plain store
// first reads each line of `out` from memory, a quarter more traffic for
// this memory-bound update. The arithmetic is the same code either way, so
// the results are bitwise equal.
template <class NewValue>
void write_updated(const float* p, float* out, int64_t n, NewValue new_value) {
  constexpr int64_t kChunk = 1024;
  alignas(32) float chunk[kChunk];
#if defined(__AVX__)
  const bool stream = out != p && reinterpret_cast<uintptr_t>(out) % 32 == 0;
#else
  const bool stream = false;  // built without AVX (a Debug build): plain stores
#endif
  for (int64_t k0 = 0; k0 < n; k0 += kChunk) {
    const int64_t len = std::min(kChunk, n - k0);
    for (int64_t k = 0; k < len; ++k) chunk[k] = new_value(k0 + k);
#if defined(__AVX__)
    if (stream && len == kChunk) {
      for (int64_t k = 0; k < kChunk; k += 8) _mm256_stream_ps(out + k0 + k, _mm256_load_ps(chunk + k));
      continue;
    }
#endif
    std::memcpy(out + k0, chunk, static_cast<size_t>(len) * sizeof(float));
  }
#if defined(__AVX__)
  if (stream) _mm_sfence();
#endif
}

// torch.optim.SGD (dampening 0): g += wd*p; buf = g on the first step,
// else buf = mu*buf + g; nesterov uses g + mu*buf; p -= lr * that.
class Sgd final : public Optimizer {
 public:
  explicit Sgd(const OptimizerConfig& c) : c_(c) {}
  OptimizerKind kind() const override { return OptimizerKind::sgd; }
  int slots_per_param() const override { return c_.momentum != 0.0f ? 1 : 0; }

  void step_into(std::span<const Tensor> from, std::span<Tensor> to, std::span<const Tensor> grads,
                 OptimizerState& st, float lr) const override {
    check_into(from, to, grads);
    if (backend_steps_into(from, to, StepKernel::Sgd)) return sgd_step_on_device(c_, to, grads, st, lr);
    const bool use_momentum = c_.momentum != 0.0f;
    PD_CHECK(!use_momentum || st.slots.size() == to.size(), "optimizer state not made for these params");
    const bool first = st.step == 0;
    const float mu = c_.momentum, wd = c_.weight_decay;
    for (size_t i = 0; i < to.size(); ++i) {
      check_pair(to[i], grads[i]);
      const float* p = from[i].f32();
      float* out = to[i].f32();
      const float* g = grads[i].f32();
      const int64_t n = to[i].numel();
      if (!use_momentum) {
        write_updated(p, out, n, [&](int64_t k) { return p[k] - lr * (g[k] + wd * p[k]); });
        continue;
      }
      float* buf = st.slots[i].f32();
      write_updated(p, out, n, [&](int64_t k) {
        float d = g[k] + wd * p[k];
        buf[k] = first ? d : mu * buf[k] + d;
        float upd = c_.nesterov ? d + mu * buf[k] : buf[k];
        return p[k] - lr * upd;
      });
    }
    ++st.step;
  }

 private:
  OptimizerConfig c_;
};

// torch.optim.Adam / AdamW. Adam adds wd*p to the gradient (L2); AdamW
// decays the weights directly: p *= 1 - lr*wd before the Adam update.
class Adam final : public Optimizer {
 public:
  Adam(const OptimizerConfig& c, bool decoupled) : c_(c), decoupled_(decoupled) {}
  OptimizerKind kind() const override { return decoupled_ ? OptimizerKind::adamw : OptimizerKind::adam; }
  int slots_per_param() const override { return 2; }

  void step_into(std::span<const Tensor> from, std::span<Tensor> to, std::span<const Tensor> grads,
                 OptimizerState& st, float lr) const override {
    check_into(from, to, grads);
    if (backend_steps_into(from, to, StepKernel::Adam)) return adam_step_on_device(c_, decoupled_, to, grads, st, lr);
    PD_CHECK(st.slots.size() == 2 * to.size(), "optimizer state not made for these params");
    const int64_t t = ++st.step;
    const float b1 = c_.beta1, b2 = c_.beta2, wd = c_.weight_decay;
    const float bc1 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b1), static_cast<double>(t)));
    const float bc2 = 1.0f - static_cast<float>(std::pow(static_cast<double>(b2), static_cast<double>(t)));
    const float step_size = lr / bc1;
    const float bc2_sqrt = std::sqrt(bc2);
    for (size_t i = 0; i < to.size(); ++i) {
      check_pair(to[i], grads[i]);
      const float* p_in = from[i].f32();
      float* out = to[i].f32();
      const float* g = grads[i].f32();
      float* m = st.slots[2 * i].f32();
      float* v = st.slots[2 * i + 1].f32();
      const int64_t n = to[i].numel();
      write_updated(p_in, out, n, [&](int64_t k) {
        float d = g[k];
        float p = p_in[k];
        if (decoupled_) {
          p *= 1.0f - lr * wd;
        } else {
          d += wd * p;
        }
        m[k] = b1 * m[k] + (1.0f - b1) * d;
        v[k] = b2 * v[k] + (1.0f - b2) * d * d;
        float denom = std::sqrt(v[k]) / bc2_sqrt + c_.eps;
        return p - step_size * (m[k] / denom);
      });
    }
  }

 private:
  OptimizerConfig c_;
  bool decoupled_;
};

void validate(const OptimizerConfig& c) {
  auto bad = [&](const std::string& what) { throw UserError(cat("optimizer ", to_string(c.kind), ": ", what)); };
  if (!(c.lr >= 0.0f) || !std::isfinite(c.lr)) bad(cat("--lr must be a finite value >= 0, got ", c.lr));
  if (!(c.weight_decay >= 0.0f)) bad(cat("--weight-decay must be >= 0, got ", c.weight_decay));
  if (c.kind == OptimizerKind::sgd) {
    if (!(c.momentum >= 0.0f && c.momentum < 1.0f)) bad(cat("--momentum must be in [0, 1), got ", c.momentum));
    if (c.nesterov && c.momentum == 0.0f) bad("--nesterov needs a momentum > 0");
  } else {
    if (!(c.beta1 >= 0.0f && c.beta1 < 1.0f)) bad(cat("beta1 must be in [0, 1), got ", c.beta1));
    if (!(c.beta2 >= 0.0f && c.beta2 < 1.0f)) bad(cat("beta2 must be in [0, 1), got ", c.beta2));
    if (!(c.eps > 0.0f)) bad(cat("eps must be > 0, got ", c.eps));
    if (c.momentum != 0.0f) bad("--momentum applies to sgd only (adam uses beta1)");
    if (c.nesterov) bad("--nesterov applies to sgd only");
  }
}

}  // namespace

const char* to_string(OptimizerKind k) { return name_in(kOptimizerKinds, k); }
const char* to_string(LrScheduleKind k) { return name_in(kLrScheduleKinds, k); }
std::optional<OptimizerKind> parse_optimizer_kind(std::string_view text) { return value_in(kOptimizerKinds, text); }
std::optional<LrScheduleKind> parse_lr_schedule_kind(std::string_view text) {
  return value_in(kLrScheduleKinds, text);
}

OptimizerState Optimizer::make_state(std::span<const Tensor> params) const {
  OptimizerState st;
  const int k = slots_per_param();
  st.slots.reserve(params.size() * static_cast<size_t>(k));
  for (const Tensor& p : params)
    for (int s = 0; s < k; ++s) st.slots.push_back(Tensor::zeros(p.shape(), DType::F32, p.device()));
  return st;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c) {
  validate(c);
  switch (c.kind) {
    case OptimizerKind::sgd: return std::make_unique<Sgd>(c);
    case OptimizerKind::adam: return std::make_unique<Adam>(c, false);
    case OptimizerKind::adamw: return std::make_unique<Adam>(c, true);
  }
  throw UserError("unknown optimizer");  // (unreachable: the switch covers every kind)
}

// Warm-up ramps linearly so that step s < warmup uses base·(s+1)/warmup:
// the first step already moves and the last warm-up step reaches base.
// The decay of `step` and `cosine` starts counting after the warm-up.
float LrSchedule::lr_at(int64_t step) const {
  if (step < warmup_steps)
    return static_cast<float>(static_cast<double>(base_lr) * static_cast<double>(step + 1) /
                              static_cast<double>(warmup_steps));
  const int64_t after = step - warmup_steps;
  if (kind == LrScheduleKind::step) {
    return static_cast<float>(static_cast<double>(base_lr) *
                              std::pow(static_cast<double>(gamma), static_cast<double>(after / step_size)));
  }
  if (kind == LrScheduleKind::cosine) {
    const int64_t span = total_steps - warmup_steps;
    double t = static_cast<double>(std::min(after, span)) / static_cast<double>(span);
    return static_cast<float>(min_lr + (static_cast<double>(base_lr) - min_lr) * 0.5 * (1.0 + std::cos(kPi * t)));
  }
  return base_lr;
}

void validate(const LrSchedule& s) {
  if (!(s.base_lr >= 0.0f)) throw UserError(cat("learning rate must be >= 0, got ", s.base_lr));
  if (s.warmup_steps < 0) throw UserError(cat("warm-up steps must be >= 0, got ", s.warmup_steps));
  if (s.kind == LrScheduleKind::step) {
    if (s.step_size <= 0) throw UserError(cat("the step schedule needs --lr-step-size > 0, got ", s.step_size));
    if (!(s.gamma > 0.0f)) throw UserError(cat("the step schedule needs --lr-gamma > 0, got ", s.gamma));
  }
  if (s.kind == LrScheduleKind::cosine) {
    if (s.total_steps <= s.warmup_steps)
      throw UserError(cat("the cosine schedule needs total steps (", s.total_steps,
                          ") greater than the warm-up steps (", s.warmup_steps, ")"));
    if (!(s.min_lr >= 0.0f && s.min_lr <= s.base_lr))
      throw UserError(cat("--min-lr must be in [0, lr], got ", s.min_lr));
  }
}

}  // namespace pd
