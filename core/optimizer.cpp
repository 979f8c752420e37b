// SGD, Adam and AdamW with PyTorch's update rules, and the LR schedules.
#include "core/optimizer.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>
#include <utility>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/spelling_table.h"

namespace pd {

namespace {

constexpr double kPi = 3.14159265358979323846;

// One table per set: to_string and parse read the same spelling.
constexpr std::array<std::pair<OptimizerKind, const char*>, 3> kOptimizerKinds{
    {{OptimizerKind::sgd, "sgd"}, {OptimizerKind::adam, "adam"}, {OptimizerKind::adamw, "adamw"}}};
constexpr std::array<std::pair<LrShape, const char*>, 3> kLrShapes{
    {{LrShape::constant, "constant"}, {LrShape::step, "step"}, {LrShape::cosine, "cosine"}}};

void check_into(std::span<const Tensor> from, std::span<Tensor> to, std::span<const Tensor> grads) {
  PD_CHECK(from.size() == grads.size() && to.size() == grads.size(), "params/grads count mismatch");
  for (size_t i = 0; i < to.size(); ++i) {
    PD_CHECK(to[i].numel() == from[i].numel() && to[i].device() == from[i].device(),
             "optimizer step into a tensor unlike its source: ", shape_str(to[i].shape()), " vs ",
             shape_str(from[i].shape()));
    PD_CHECK(to[i].numel() == grads[i].numel(), "param/grad size mismatch: ", shape_str(to[i].shape()), " vs ",
             shape_str(grads[i].shape()));
    PD_CHECK(to[i].device() == to[0].device() && grads[i].device() == to[0].device(),
             "optimizer step given tensors on two devices: ", to[0].device().str(), " and ",
             (to[i].device() == to[0].device() ? grads[i] : to[i]).device().str());
  }
}

// The pointers and sizes the multi-tensor DeviceOps entries take; slot k of
// param i is st.slots[slots_per_param * i + k].
struct StepArrays {
  std::vector<int64_t> sizes;
  std::vector<const float*> from, grads;
  std::vector<float*> to, slot_a, slot_b;
  StepArrays(std::span<const Tensor> f, std::span<Tensor> t, std::span<const Tensor> g, OptimizerState& st,
             int slots_per_param) {
    for (size_t i = 0; i < t.size(); ++i) {
      sizes.push_back(t[i].numel());
      from.push_back(f[i].f32());
      to.push_back(t[i].f32());
      grads.push_back(g[i].f32());
      if (slots_per_param > 0) slot_a.push_back(st.slots[static_cast<size_t>(slots_per_param) * i].f32());
      if (slots_per_param > 1) slot_b.push_back(st.slots[static_cast<size_t>(slots_per_param) * i + 1].f32());
    }
  }
  int64_t count() const { return static_cast<int64_t>(sizes.size()); }
};

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
    const bool use_momentum = c_.momentum != 0.0f;
    PD_CHECK(!use_momentum || st.slots.size() == to.size(), "optimizer state not made for these params");
    ++st.step;
    if (to.empty()) return;
    StepArrays a(from, to, grads, st, use_momentum ? 1 : 0);
    device_ops(to[0].device())
        .sgd_step_multi(a.count(), a.sizes.data(), a.from.data(), a.to.data(), a.grads.data(),
                        use_momentum ? a.slot_a.data() : nullptr, lr, c_.momentum, c_.weight_decay, c_.nesterov);
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
    PD_CHECK(st.slots.size() == 2 * to.size(), "optimizer state not made for these params");
    const int64_t t = ++st.step;
    if (to.empty()) return;
    StepArrays a(from, to, grads, st, 2);
    device_ops(to[0].device())
        .adam_step_multi(a.count(), a.sizes.data(), a.from.data(), a.to.data(), a.grads.data(), a.slot_a.data(),
                         a.slot_b.data(), lr, c_.beta1, c_.beta2, c_.eps, c_.weight_decay, decoupled_, t);
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
const char* to_string(LrShape k) { return name_in(kLrShapes, k); }
std::optional<OptimizerKind> parse_optimizer_kind(std::string_view text) { return value_in(kOptimizerKinds, text); }
std::optional<LrShape> parse_lr_schedule_kind(std::string_view text) {
  return value_in(kLrShapes, text);
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
  if (kind == LrShape::step) {
    return static_cast<float>(static_cast<double>(base_lr) *
                              std::pow(static_cast<double>(gamma), static_cast<double>(after / step_size)));
  }
  if (kind == LrShape::cosine) {
    const int64_t span = total_steps - warmup_steps;
    double t = static_cast<double>(std::min(after, span)) / static_cast<double>(span);
    return static_cast<float>(min_lr + (static_cast<double>(base_lr) - min_lr) * 0.5 * (1.0 + std::cos(kPi * t)));
  }
  return base_lr;
}

std::vector<double> squared_norms(std::span<const Tensor> grads) {
  std::vector<double> squares(grads.size(), 0.0);
  if (grads.empty()) return squares;
  std::vector<int64_t> sizes;
  std::vector<const float*> xs;
  for (const Tensor& g : grads) {
    PD_CHECK(g.device() == grads[0].device(), "gradient norm of tensors on two devices: ", grads[0].device().str(),
             " and ", g.device().str());
    sizes.push_back(g.numel());
    xs.push_back(g.f32());
  }
  device_ops(grads[0].device()).sum_squares_multi(static_cast<int64_t>(sizes.size()), sizes.data(), xs.data(),
                                                  squares.data());
  return squares;
}

double global_norm(std::vector<double> squares) {
  std::sort(squares.begin(), squares.end());
  double total = 0;
  for (double s : squares) total += s;
  return std::sqrt(total);
}

float clip_to_norm(std::span<Tensor> grads, double norm, float max_norm) {
  PD_CHECK(max_norm > 0, "gradient clipping needs a positive max norm, got ", max_norm);
  const double factor = static_cast<double>(max_norm) / (norm + 1e-6);
  if (!(factor < 1.0)) return 1.0f;  // a NaN norm too: the gradients hold a NaN already
  const float f = static_cast<float>(factor);
  for (Tensor& g : grads) device_ops(g.device()).scale(g.numel(), f, g.f32(), g.f32());
  return f;
}

void validate(const LrSchedule& s) {
  if (!(s.base_lr >= 0.0f)) throw UserError(cat("learning rate must be >= 0, got ", s.base_lr));
  if (s.warmup_steps < 0) throw UserError(cat("warm-up steps must be >= 0, got ", s.warmup_steps));
  if (s.kind == LrShape::step) {
    if (s.step_size <= 0) throw UserError(cat("the step schedule needs --lr-step-size > 0, got ", s.step_size));
    if (!(s.gamma > 0.0f)) throw UserError(cat("the step schedule needs --lr-gamma > 0, got ", s.gamma));
  }
  if (s.kind == LrShape::cosine) {
    if (s.total_steps <= s.warmup_steps)
      throw UserError(cat("the cosine schedule needs total steps (", s.total_steps,
                          ") greater than the warm-up steps (", s.warmup_steps, ")"));
    if (!(s.min_lr >= 0.0f && s.min_lr <= s.base_lr))
      throw UserError(cat("--min-lr must be in [0, lr], got ", s.min_lr));
  }
}

}  // namespace pd
