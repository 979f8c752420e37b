#include "runtime/schedule/schedule.h"

#include <algorithm>

#include "core/error.h"

namespace pd {

ScheduleKind parse_schedule_kind(const std::string& s) {
  if (s == "1f1b-rr") return ScheduleKind::OneFOneBRoundRobin;
  if (s == "gpipe") return ScheduleKind::GPipe;
  if (s == "1f1b-flush") return ScheduleKind::OneFOneBFlush;
  throw UserError(cat("unknown schedule '", s, "': use 1f1b-rr, gpipe or 1f1b-flush"));
}

std::string to_string(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::OneFOneBRoundRobin: return "1f1b-rr";
    case ScheduleKind::GPipe: return "gpipe";
    case ScheduleKind::OneFOneBFlush: return "1f1b-flush";
  }
  return "?";
}

WeightPolicy parse_weight_policy(const std::string& s) {
  if (s == "stash") return WeightPolicy::Stash;
  if (s == "vertical") return WeightPolicy::Vertical;
  if (s == "none") return WeightPolicy::None;
  throw UserError(cat("unknown weight policy '", s, "': use stash, vertical or none"));
}

std::string to_string(WeightPolicy p) {
  switch (p) {
    case WeightPolicy::Stash: return "stash";
    case WeightPolicy::Vertical: return "vertical";
    case WeightPolicy::None: return "none";
  }
  return "?";
}

bool is_flush(ScheduleKind k) { return k != ScheduleKind::OneFOneBRoundRobin; }

const char* to_string(ActionKind k) {
  switch (k) {
    case ActionKind::Forward: return "forward";
    case ActionKind::Backward: return "backward";
    case ActionKind::SendActivation: return "send-activation";
    case ActionKind::RecvActivation: return "recv-activation";
    case ActionKind::SendGradient: return "send-gradient";
    case ActionKind::RecvGradient: return "recv-gradient";
    case ActionKind::AllReduce: return "allreduce";
    case ActionKind::OptimizerStep: return "optimizer-step";
  }
  return "?";
}

// ---- Schedule --------------------------------------------------------------

Schedule::Schedule(const Plan& plan, const ScheduleOptions& options) : options_(options) {
  if (plan.stages.empty()) throw UserError("the plan has no stages");
  if (options.minibatches < 1)
    throw UserError(cat("the number of minibatches must be at least 1 (got ", options.minibatches, ")"));
  if (options.microbatches < 1)
    throw UserError(cat("the number of microbatches must be at least 1 (got ", options.microbatches, ")"));
  if (!is_flush(options.kind) && options.microbatches != 1)
    throw UserError("microbatches apply to the flush schedules (gpipe, 1f1b-flush) only; 1f1b-rr runs whole minibatches");
  if (is_flush(options.kind) && options.policy != WeightPolicy::Stash)
    throw UserError(cat("weight policy '", to_string(options.policy), "' applies to 1f1b-rr only; ",
                        to_string(options.kind), " uses one version per batch"));

  int total = 0;
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const PlanStage& st = plan.stages[s];
    if (st.ranks.empty()) throw UserError(cat("plan stage ", s, " has no ranks"));
    if (st.replicas != static_cast<int>(st.ranks.size()))
      throw UserError(cat("plan stage ", s, ": replicas is ", st.replicas, " but it lists ",
                          st.ranks.size(), " ranks"));
    total += st.replicas;
  }
  stage_of_rank_.assign(total, -1);
  replica_of_rank_.assign(total, -1);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    const auto& ranks = plan.stages[s].ranks;
    for (size_t k = 0; k < ranks.size(); ++k) {
      int r = ranks[k];
      if (r < 0 || r >= total)
        throw UserError(cat("plan stage ", s, ": rank ", r, " is outside 0..", total - 1));
      if (stage_of_rank_[r] != -1)
        throw UserError(cat("plan: rank ", r, " appears in stage ", stage_of_rank_[r], " and stage ", s));
      stage_of_rank_[r] = static_cast<int>(s);
      replica_of_rank_[r] = static_cast<int>(k);
    }
    ranks_.push_back(ranks);
  }
  int before = 0;
  for (const auto& ranks : ranks_) {
    int r = static_cast<int>(ranks.size());
    warmup_.push_back((total - 1 - before) / r);
    before += r;
  }
}

int Schedule::update_lag(int stage) const {
  return !is_flush(options_.kind) && replicas(stage) > 1 ? 1 : 0;
}

int Schedule::noam() const {
  int r0 = replicas(0);
  return (workers() + r0 - 1) / r0;
}

int64_t Schedule::in_flight_limit(int rank) const {
  int s = stage_of(rank);
  if (options_.kind == ScheduleKind::GPipe) {
    int64_t r = replicas(s), k = replica_of(rank), n = options_.microbatches;
    return std::max<int64_t>(1, (n - k + r - 1) / r);
  }
  return warmup_[s] + 1;
}

int64_t Schedule::rounds(int stage) const {
  if (is_flush(options_.kind)) return options_.minibatches;
  int64_t r = replicas(stage);
  return (options_.minibatches + r - 1) / r;
}

int64_t Schedule::input_version(int64_t m) const {
  int64_t r0 = replicas(0);
  int64_t done_rounds = std::max<int64_t>(0, m / r0 - warmup_[0] - update_lag(0));
  return std::min(options_.minibatches, done_rounds * r0);
}

int64_t Schedule::vertical_version(int stage, int64_t m) const {
  int64_t r = replicas(stage);
  return input_version(m) / r * r;
}

std::vector<Action> Schedule::actions(int rank) const {
  std::vector<Action> out;
  ActionCursor c = cursor(rank);
  Action a;
  while (c.next(a)) out.push_back(a);
  return out;
}

std::vector<std::vector<Action>> build_schedule(const Plan& plan, const ScheduleOptions& options) {
  Schedule s(plan, options);
  std::vector<std::vector<Action>> all(s.workers());
  for (int r = 0; r < s.workers(); ++r) all[r] = s.actions(r);
  return all;
}

// ---- ActionCursor ----------------------------------------------------------

ActionCursor::ActionCursor(const Schedule* schedule, int rank) : s_(schedule), rank_(rank) {
  PD_CHECK(rank >= 0 && rank < schedule->workers(), "rank ", rank);
  stage_ = s_->stage_of(rank);
  replica_ = s_->replica_of(rank);
  replicas_ = s_->replicas(stage_);
  flush_ = is_flush(s_->options().kind);
  first_ = stage_ == 0;
  last_ = stage_ == s_->stages() - 1;
  lagged_ = !flush_ && s_->update_lag(stage_) > 0;
  vertical_ = !flush_ && s_->options().policy == WeightPolicy::Vertical;
  int64_t items = flush_ ? s_->options().microbatches : s_->options().minibatches;
  local_count_ = items > replica_ ? (items - replica_ + replicas_ - 1) / replicas_ : 0;
  limit_ = s_->in_flight_limit(rank);
  rounds_ = s_->rounds(stage_);
}

int64_t ActionCursor::global_index(int64_t local) const { return replica_ + local * replicas_; }

const Action* ActionCursor::refill() {
  while (head_ == buffered_) {
    head_ = buffered_ = 0;
    if (done_) return nullptr;
    if (flush_ && batch_ >= s_->options().minibatches) {
      done_ = true;
    } else if (forwards_ < local_count_ && forwards_ - backwards_ < limit_) {
      expand_forward();
    } else if (backwards_ < local_count_) {
      expand_backward();
    } else if (flush_) {
      expand_update(static_cast<int>(local_count_));
      ++batch_;
      forwards_ = backwards_ = 0;
    } else if (round_ < rounds_) {
      expand_update(0);  // a round this replica has no minibatch for
    } else {
      done_ = true;
    }
  }
  return &buffer_[head_++];
}

bool ActionCursor::next(Action& out) {
  const Action* a = next();
  if (!a) return false;
  out = *a;
  return true;
}

// Appends an action for the current item (minibatch or flush microbatch).
inline Action& ActionCursor::emit(ActionKind kind, int64_t index) {
  Action& a = buffer_[buffered_++];
  a = Action{};
  a.kind = kind;
  a.minibatch = flush_ ? batch_ : index;
  a.microbatch = flush_ ? static_cast<int>(index) : 0;
  return a;
}

inline Action& ActionCursor::emit_message(ActionKind kind, int64_t index, int peer_stage, bool gradient) {
  Action& a = emit(kind, index);
  a.peer = s_->rank_for(peer_stage, index);
  a.tag = s_->tag(a.minibatch, a.microbatch, gradient);
  return a;
}

void ActionCursor::expand_forward() {
  const int64_t idx = global_index(forwards_);
  if (!first_) emit_message(ActionKind::RecvActivation, idx, stage_ - 1, false);
  emit(ActionKind::Forward, idx).weight_version = vertical_ ? s_->vertical_version(stage_, idx) : version_;
  if (!last_) emit_message(ActionKind::SendActivation, idx, stage_ + 1, false);
  ++forwards_;
}

void ActionCursor::expand_backward() {
  const int64_t idx = global_index(backwards_);
  if (lagged_ && backwards_ > 0) expand_update(1, false, true);  // the previous round's step, deferred to here
  if (!last_) emit_message(ActionKind::RecvGradient, idx, stage_ + 1, true);
  Action& b = emit(ActionKind::Backward, idx);
  if (flush_) {
    b.weight_version = version_;
  } else {
    switch (s_->options().policy) {
      case WeightPolicy::Stash: {
        // F(j) ran as soon as at most limit-1 minibatches were in flight,
        // i.e. after max(0, j - (limit-1)) full update rounds.
        int64_t rounds_before = std::max<int64_t>(0, backwards_ - (limit_ - 1) - (lagged_ ? 1 : 0));
        b.weight_version = std::min(s_->options().minibatches, rounds_before * replicas_);
        break;
      }
      case WeightPolicy::Vertical: b.weight_version = s_->vertical_version(stage_, idx); break;
      case WeightPolicy::None: b.weight_version = version_; break;
    }
  }
  if (!first_) emit_message(ActionKind::SendGradient, idx, stage_ - 1, true);
  ++backwards_;
  if (!flush_) expand_update(1, true, !lagged_ || backwards_ == local_count_);
}

void ActionCursor::expand_update(int local_gradients, bool allreduce, bool step) {
  int gradient_count;
  int64_t created;
  if (flush_) {
    gradient_count = s_->options().microbatches;
    created = version_ + 1;
  } else {
    int64_t m = s_->options().minibatches;
    gradient_count = static_cast<int>(std::min<int64_t>(replicas_, m - round_ * replicas_));
    created = std::min(m, (round_ + 1) * replicas_);
  }
  auto emit_update = [&](ActionKind kind) -> Action& {
    Action& u = buffer_[buffered_++];
    u = Action{};
    u.kind = kind;
    u.round = round_;
    u.local_gradients = local_gradients;
    u.gradient_count = gradient_count;
    return u;
  };
  if (replicas_ > 1 && allreduce) emit_update(ActionKind::AllReduce);
  if (!step) return;
  emit_update(ActionKind::OptimizerStep).version_created = created;
  version_ = created;
  ++round_;
}

}  // namespace pd
