#pragma once
// Optimizers update a list of parameter tensors in place from gradients.
// Their state (momentum, Adam moments, step count) lives in OptimizerState
// so a pipeline stage can checkpoint it and a test can inspect it.
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.h"

namespace pd {

enum class OptimizerKind { sgd, adam, adamw };
// constant: base_lr; step: times gamma every step_size steps; cosine: down
// to min_lr at total_steps.
enum class LrShape { constant, step, cosine };

// "sgd", "adam", "adamw"; "constant", "step", "cosine" (the --optimizer and
// --lr-schedule spellings, and what metrics and reports print).
const char* to_string(OptimizerKind k);
const char* to_string(LrShape k);
// The inverse of to_string; nullopt for any other text (callers name the flag).
std::optional<OptimizerKind> parse_optimizer_kind(std::string_view text);
std::optional<LrShape> parse_lr_schedule_kind(std::string_view text);

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::sgd;
  float lr = 0.01f;
  float momentum = 0.0f;      // sgd
  float weight_decay = 0.0f;  // sgd: L2 added to the grad; adamw: decoupled
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // adam/adamw
  bool nesterov = false;
};

struct OptimizerState {
  int64_t step = 0;
  std::vector<Tensor> slots;  // per param: [momentum] or [m, v]
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  virtual OptimizerKind kind() const = 0;
  virtual int slots_per_param() const = 0;
  // Allocates state for these params (zeros, same devices).
  OptimizerState make_state(std::span<const Tensor> params) const;
  // One update with learning rate lr (from the schedule), in place.
  void step(std::span<Tensor> params, std::span<const Tensor> grads, OptimizerState& st, float lr) const {
    step_into(params, params, grads, st, lr);
  }
  // The same update, reading the weights from `from` and writing the new
  // ones to `to` (same shapes; `to` may be `from`). Bitwise equal to copying
  // `from` into `to` and stepping in place - but a stage that must keep the
  // old version (weight stashing) saves that copy's memory traffic.
  virtual void step_into(std::span<const Tensor> from, std::span<Tensor> to, std::span<const Tensor> grads,
                         OptimizerState& st, float lr) const = 0;
};

// Throws UserError for a bad value.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerConfig& c);

// Gradient clipping by the global L2 norm (torch.nn.utils.clip_grad_norm_).
// A pipeline stage computes its tensors' squares, the stages exchange them,
// and every stage then gets the bits a single worker gets.
//
// Each tensor's sum of squares, in double (DeviceOps::sum_squares_multi).
std::vector<double> squared_norms(std::span<const Tensor> grads);
// The L2 norm from such sums, added smallest first: the same bits whatever
// order the sums come in and however they were split between stages.
double global_norm(std::vector<double> squares);
// PyTorch's rule: grads *= max_norm / (norm + 1e-6) when that factor is
// below 1, else grads stay as they are. Returns the factor (1: unchanged).
float clip_to_norm(std::span<Tensor> grads, double norm, float max_norm);

// Learning-rate schedules; step counts optimizer steps from 0.
struct LrSchedule {
  LrShape kind = LrShape::constant;
  float base_lr = 0.01f;
  int64_t warmup_steps = 0;       // linear warm-up from 0 over these steps
  int64_t step_size = 0;          // step: multiply by gamma every step_size steps
  float gamma = 0.1f;
  int64_t total_steps = 0;        // cosine: decays to min_lr at total_steps
  float min_lr = 0.0f;
  float lr_at(int64_t step) const;
};
void validate(const LrSchedule& s);  // throws UserError

}  // namespace pd
