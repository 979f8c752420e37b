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
  int64_t items = is_flush(s_->options().kind) ? s_->options().microbatches : s_->options().minibatches;
  local_count_ = items > replica_ ? (items - replica_ + replicas_ - 1) / replicas_ : 0;
  limit_ = s_->in_flight_limit(rank);
}

int64_t ActionCursor::global_index(int64_t local) const { return replica_ + local * replicas_; }

bool ActionCursor::next(Action& out) {
  while (head_ == buffered_) {
    head_ = buffered_ = 0;
    if (done_) return false;
    const bool flush = is_flush(s_->options().kind);
    if (flush && batch_ >= s_->options().minibatches) {
      done_ = true;
    } else if (forwards_ < local_count_ && forwards_ - backwards_ < limit_) {
      expand_forward();
    } else if (backwards_ < local_count_) {
      expand_backward();
    } else if (flush) {
      expand_update(static_cast<int>(local_count_));
      ++batch_;
      forwards_ = backwards_ = 0;
    } else if (round_ < s_->rounds(stage_)) {
      expand_update(0);  // a round this replica has no minibatch for
    } else {
      done_ = true;
    }
  }
  out = buffer_[head_++];
  return true;
}

void ActionCursor::expand_forward() {
  const bool flush = is_flush(s_->options().kind);
  const int64_t idx = global_index(forwards_);
  Action a;
  a.minibatch = flush ? batch_ : idx;
  a.microbatch = flush ? static_cast<int>(idx) : 0;
  const int last = s_->stages() - 1;
  if (stage_ > 0) {
    Action r = a;
    r.kind = ActionKind::RecvActivation;
    r.peer = s_->rank_for(stage_ - 1, idx);
    r.tag = s_->tag(a.minibatch, a.microbatch, false);
    push(r);
  }
  Action f = a;
  f.kind = ActionKind::Forward;
  if (flush || s_->options().policy != WeightPolicy::Vertical)
    f.weight_version = version_;
  else
    f.weight_version = s_->vertical_version(stage_, idx);
  push(f);
  if (stage_ < last) {
    Action snd = a;
    snd.kind = ActionKind::SendActivation;
    snd.peer = s_->rank_for(stage_ + 1, idx);
    snd.tag = s_->tag(a.minibatch, a.microbatch, false);
    push(snd);
  }
  ++forwards_;
}

void ActionCursor::expand_backward() {
  const bool flush = is_flush(s_->options().kind);
  const int64_t idx = global_index(backwards_);
  Action a;
  a.minibatch = flush ? batch_ : idx;
  a.microbatch = flush ? static_cast<int>(idx) : 0;
  const int last = s_->stages() - 1;
  const bool lagged = !flush && s_->update_lag(stage_) > 0;
  if (lagged && backwards_ > 0) expand_update(1, false, true);  // the previous round's step, deferred to here
  if (stage_ < last) {
    Action r = a;
    r.kind = ActionKind::RecvGradient;
    r.peer = s_->rank_for(stage_ + 1, idx);
    r.tag = s_->tag(a.minibatch, a.microbatch, true);
    push(r);
  }
  Action b = a;
  b.kind = ActionKind::Backward;
  if (flush) {
    b.weight_version = version_;
  } else {
    switch (s_->options().policy) {
      case WeightPolicy::Stash: {
        // F(j) ran as soon as at most limit-1 minibatches were in flight,
        // i.e. after max(0, j - (limit-1)) full update rounds.
        int64_t rounds_before = std::max<int64_t>(0, backwards_ - (limit_ - 1) - s_->update_lag(stage_));
        b.weight_version = std::min(s_->options().minibatches, rounds_before * replicas_);
        break;
      }
      case WeightPolicy::Vertical: b.weight_version = s_->vertical_version(stage_, idx); break;
      case WeightPolicy::None: b.weight_version = version_; break;
    }
  }
  push(b);
  if (stage_ > 0) {
    Action snd = a;
    snd.kind = ActionKind::SendGradient;
    snd.peer = s_->rank_for(stage_ - 1, idx);
    snd.tag = s_->tag(a.minibatch, a.microbatch, true);
    push(snd);
  }
  ++backwards_;
  if (!flush) expand_update(1, true, !lagged || backwards_ == local_count_);
}

void ActionCursor::expand_update(int local_gradients, bool allreduce, bool step) {
  Action u;
  u.round = round_;
  u.local_gradients = local_gradients;
  if (is_flush(s_->options().kind)) {
    u.gradient_count = s_->options().microbatches;
    u.version_created = version_ + 1;
  } else {
    int64_t m = s_->options().minibatches;
    u.gradient_count = static_cast<int>(std::min<int64_t>(replicas_, m - round_ * replicas_));
    u.version_created = std::min(m, (round_ + 1) * replicas_);
  }
  if (replicas_ > 1 && allreduce) {
    Action ar = u;
    ar.kind = ActionKind::AllReduce;
    ar.version_created = -1;
    push(ar);
  }
  if (!step) return;
  u.kind = ActionKind::OptimizerStep;
  push(u);
  version_ = u.version_created;
  ++round_;
}

}  // namespace pd
