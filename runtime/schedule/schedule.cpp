#include "runtime/schedule/schedule.h"

#include <algorithm>
#include <limits>

#include "core/error.h"

namespace pd {

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
    case ActionKind::BackwardWeight: return "backward-weight";
  }
  return "?";
}

// ---- Schedule --------------------------------------------------------------

Schedule::Schedule(const Plan& plan, const ScheduleOptions& options) : options_(options) {
  check_options(plan);
  chunks_ = options.kind->chunks(options.virtual_stages);
  if (chunks_ > 1) map_chunks(plan);
  else map_ranks(plan);
  options.kind->check(plan, options);
  order_ = options.kind->worker_orders(*this);
  for (const auto& order : order_)
    for (const OrderEntry& e : order) weight_passes_ = weight_passes_ || e.kind == ActionKind::BackwardWeight;
}

int64_t Schedule::oldest_version_needed(int stage, int replica, int64_t forwards_done) const {
  const ScheduleOptions& o = options_;
  const int r = replicas(stage);
  if (o.kind->weight_versions() > 1) {
    // 2bw: the version the next forward uses, its batch's predecessor's.
    const int64_t per_batch = (o.microbatches - replica + r - 1) / r;
    return o.kind->batch_version(forwards_done / per_batch);
  }
  if (o.policy == WeightPolicy::Vertical) {
    const int64_t next = replica + forwards_done * r;
    if (next < o.minibatches) return vertical_version(stage, next);
  }
  return std::numeric_limits<int64_t>::max();
}

bool Schedule::holds_several_versions() const {
  return (!options_.kind->flushes() && options_.policy != WeightPolicy::None) || options_.kind->weight_versions() > 1;
}

int Schedule::versions_kept() const { return options_.kind->weight_versions(); }

// What every schedule refuses; each kind's own checks follow in its check().
void Schedule::check_options(const Plan& plan) const {
  const ScheduleOptions& o = options_;
  const ScheduleKind& kind = *o.kind;
  if (plan.stages.empty()) throw UserError("the plan has no stages");
  if (o.minibatches < 1)
    throw UserError(cat("the number of minibatches must be at least 1 (got ", o.minibatches, ")"));
  if (o.microbatches < 1)
    throw UserError(cat("the number of microbatches must be at least 1 (got ", o.microbatches, ")"));
  if (!kind.flushes() && o.microbatches != 1)
    throw UserError(cat("microbatches apply to the schedules that split a batch (",
                        schedule_names([](const ScheduleKind& k) { return k.flushes(); }), ") only; ", kind.name(),
                        " runs whole minibatches"));
  if (!kind.takes_weight_policy() && o.policy != WeightPolicy::Stash)
    throw UserError(cat("weight policy '", to_string(o.policy), "' applies to ",
                        schedule_names([](const ScheduleKind& k) { return k.takes_weight_policy(); }), " only; ",
                        kind.name(), " uses one version per batch"));
  if (o.virtual_stages < 1 || o.virtual_stages > 255)
    throw UserError(cat("the number of virtual stages must be 1..255 (got ", o.virtual_stages, ")"));
  if (!kind.takes_virtual_stages() && o.virtual_stages != 1)
    throw UserError(cat("virtual stages apply to ",
                        schedule_names([](const ScheduleKind& k) { return k.takes_virtual_stages(); }), " only (",
                        kind.name(), " places its stages itself)"));
  if (kind.unreplicated_only())
    for (const PlanStage& st : plan.stages)
      if (st.ranks.size() != 1)
        throw UserError(cat(kind.name(), " runs unreplicated plans only, but stage ", st.index, " has ",
                            st.ranks.size(), " replicas; use ",
                            schedule_names([](const ScheduleKind& k) { return !k.unreplicated_only(); }),
                            " for replicated stages"));
}

void Schedule::map_ranks(const Plan& plan) {
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

// A plan of workers x chunks unreplicated stages; the kind places each
// stage on a worker as one of its chunks.
void Schedule::map_chunks(const Plan& plan) {
  const int stages = static_cast<int>(plan.stages.size()), c = chunks_;
  const std::string kind = options_.kind->name();
  const std::string how = options_.kind->takes_virtual_stages() ? cat(c, " virtual stages") : cat(c, " chunks");
  if (stages % c != 0 || stages / c < 2)
    throw UserError(cat(kind, " with ", how, " needs a plan of workers x ", c,
                        " stages (at least 2 workers); this plan has ", stages, " stages (plan one with `--workers ",
                        2 * c, "` or more", options_.kind->takes_virtual_stages() ? ", or change --virtual-stages" : "",
                        ")"));
  const int workers = stages / c;
  if (options_.microbatches % options_.kind->microbatch_multiple(workers) != 0)
    throw UserError(cat(kind, " runs microbatches in groups of ", options_.kind->microbatch_multiple(workers),
                        ": --microbatches (", options_.microbatches, ") must be a multiple of ",
                        options_.kind->microbatch_multiple(workers)));
  chunk_stages_.assign(static_cast<size_t>(workers), std::vector<int>(static_cast<size_t>(c), -1));
  places_.assign(static_cast<size_t>(stages), StagePlace{-1, -1});
  for (int w = 0; w < workers; ++w)
    for (int k = 0; k < c; ++k) {
      const int stage = options_.kind->stage_at(w, k, workers);
      PD_CHECK(stage >= 0 && stage < stages && places_[static_cast<size_t>(stage)].worker == -1 &&
                   options_.kind->chunk_of(stage, workers) == k,
               kind,
               " places worker ", w, " chunk ", k, " on stage ", stage);
      chunk_stages_[static_cast<size_t>(w)][static_cast<size_t>(k)] = stage;
      places_[static_cast<size_t>(stage)] = {w, k};
    }
  for (int w = 0; w < workers; ++w) stage_of_rank_.push_back(chunk_stages_[static_cast<size_t>(w)][0]);
  replica_of_rank_.assign(static_cast<size_t>(workers), 0);
  for (const StagePlace& at : places_) {
    ranks_.push_back({at.worker});
    warmup_.push_back(workers - 1 - at.worker);
  }
}

int64_t Schedule::order_peak(int rank, bool to_w) const {
  int64_t held = 0, peak = 0;
  for (const OrderEntry& e : batch_order(rank)) {
    if (e.kind == ActionKind::Forward) peak = std::max(peak, ++held);
    else if (e.kind == (to_w ? ActionKind::BackwardWeight : ActionKind::Backward)) --held;
  }
  return peak;
}

int64_t Schedule::held_limit(int rank) const { return options_.kind->held_limit(*this, rank); }

int Schedule::update_lag(int stage) const {
  return !is_flush(options_.kind) && replicas(stage) > 1 ? 1 : 0;
}

int Schedule::noam() const {
  int r0 = replicas(0);
  return (workers() + r0 - 1) / r0;
}

int64_t Schedule::in_flight_limit(int rank) const { return options_.kind->in_flight_limit(*this, rank); }

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

// ---- PackedAction ----------------------------------------------------------

Action PackedAction::unpack() const {
  Action a;
  a.kind = kind;
  a.chunk = chunk;
  if (is_compute()) {
    a.weight_version = key;
    a.minibatch = item;
    a.microbatch = sub;
  } else if (is_send() || is_recv()) {
    a.tag = key;
    a.minibatch = item;
    a.microbatch = sub;
    a.peer = peer;
  } else {
    a.round = key;
    a.version_created = item;
    a.gradient_count = sub;
    a.local_gradients = peer;
  }
  return a;
}

PackedAction pack_action(const Action& a) {
  PackedAction p;
  p.kind = a.kind;
  p.chunk = static_cast<uint8_t>(a.chunk);
  if (a.is_compute()) {
    p.key = a.weight_version;
    p.item = a.minibatch;
    p.sub = a.microbatch;
  } else if (a.is_send() || a.is_recv()) {
    p.key = a.tag;
    p.item = a.minibatch;
    p.sub = a.microbatch;
    p.peer = a.peer;
  } else {
    p.key = a.round;
    p.item = a.version_created;
    p.sub = a.gradient_count;
    p.peer = a.local_gradients;
  }
  return p;
}

// ---- ActionSource ----------------------------------------------------------

ActionSource::ActionSource(const Schedule* schedule, int rank) : s_(schedule), rank_(rank) {
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
  minibatches_ = s_->options().minibatches;
  policy_ = s_->options().policy;
  if (!first_ && s_->replicas(stage_ - 1) == 1) prev_rank_ = s_->ranks(stage_ - 1)[0];
  if (!last_ && s_->replicas(stage_ + 1) == 1) next_rank_ = s_->ranks(stage_ + 1)[0];
}

int64_t ActionSource::global_index(int64_t local) const { return replica_ + local * replicas_; }

int ActionSource::next_group(PackedAction* out) {
  if (const auto* given = s_->given_lists()) {  // a schedule file's list
    const std::vector<Action>& list = given->at(static_cast<size_t>(rank_));
    int n = 0;
    while (n < kMaxGroup && position_ < list.size()) out[n++] = pack_action(list[position_++]);
    return n;
  }
  if (s_->ordered()) return next_ordered_group(out);
  if (s_->options().kind->never_drains()) return next_two_bw_group(out);
  // Every expansion writes at least one action, so this returns on the
  // first pass unless the worker has just finished.
  for (;;) {
    if (done_) return 0;
    PackedAction* end = out;
    if (flush_ && batch_ >= minibatches_) {
      done_ = true;
    } else if (forwards_ < local_count_ && forwards_ - backwards_ < limit_) {
      end = expand_forward(out);
    } else if (backwards_ < local_count_) {
      end = expand_backward(out);
    } else if (flush_) {
      end = expand_update(out, static_cast<int>(local_count_));
      ++batch_;
      forwards_ = backwards_ = 0;
    } else if (round_ < rounds_) {
      end = expand_update(out, 0);  // a round this replica has no minibatch for
    } else {
      done_ = true;
    }
    if (end != out) return static_cast<int>(end - out);
  }
}

// 2bw: 1F1B over the worker's items of every batch in order (local_count_
// per batch); the batch's step right after its last backward here.
int ActionSource::next_two_bw_group(PackedAction* out) {
  const int64_t total = local_count_ * minibatches_;
  PackedAction* end = out;
  if (forwards_ < total && forwards_ - backwards_ < limit_) {
    end = expand_two_bw(out, true, forwards_++);
  } else if (backwards_ < total) {
    end = expand_two_bw(out, false, backwards_++);
    if (backwards_ % local_count_ == 0) end = expand_update(end, static_cast<int>(local_count_));
  } else {
    done_ = true;
  }
  return static_cast<int>(end - out);
}

PackedAction* ActionSource::expand_two_bw(PackedAction* out, bool forward, int64_t local) {
  const int64_t batch = local / local_count_;
  const int microbatch = static_cast<int>(replica_ + (local % local_count_) * replicas_);
  auto action = [&](ActionKind k) {
    PackedAction a;
    a.kind = k;
    a.item = batch;
    a.sub = microbatch;
    return a;
  };
  auto message = [&](ActionKind k, bool upstream, bool gradient) {
    PackedAction a = action(k);
    const int fixed = upstream ? prev_rank_ : next_rank_;
    a.peer = fixed >= 0 ? fixed : s_->rank_for(upstream ? stage_ - 1 : stage_ + 1, microbatch);
    a.key = s_->tag(batch, microbatch, gradient);
    return a;
  };
  PackedAction compute = action(forward ? ActionKind::Forward : ActionKind::Backward);
  compute.key = s_->options().kind->batch_version(batch);
  if (forward) {
    if (!first_) *out++ = message(ActionKind::RecvActivation, true, false);
    *out++ = compute;
    if (!last_) *out++ = message(ActionKind::SendActivation, false, false);
  } else {
    if (!last_) *out++ = message(ActionKind::RecvGradient, false, true);
    *out++ = compute;
    if (!first_) *out++ = message(ActionKind::SendGradient, true, true);
  }
  return out;
}

// Ordered schedules: the worker's batch order, then the batch's step.
int ActionSource::next_ordered_group(PackedAction* out) {
  if (done_ || batch_ >= minibatches_) {
    done_ = true;
    return 0;
  }
  const auto& order = s_->batch_order(rank_);
  PackedAction* end = out;
  if (position_ < order.size()) {
    const Schedule::OrderEntry& e = order[position_++];
    end = expand_ordered(out, e.kind, e.microbatch, e.chunk);
  } else {
    position_ = 0;
    end = expand_update(out, s_->items_per_batch());
    ++batch_;
  }
  return static_cast<int>(end - out);
}

PackedAction* ActionSource::expand_ordered(PackedAction* out, ActionKind kind, int microbatch, int chunk) {
  const int stage = s_->stage_of(rank_, chunk);
  const bool first = stage == 0, last = stage == s_->stages() - 1;
  auto action = [&](ActionKind k) {
    PackedAction a;
    a.kind = k;
    a.item = batch_;
    a.sub = microbatch;
    a.chunk = static_cast<uint8_t>(chunk);
    return a;
  };
  // A message across the boundary above (upstream) or below this stage.
  auto message = [&](ActionKind k, bool upstream, bool gradient) {
    PackedAction a = action(k);
    const int downstream = upstream ? stage : stage + 1;
    a.peer = s_->ranks(upstream ? stage - 1 : stage + 1)[0];  // may be this rank (a V's turn)
    a.key = s_->tag(batch_, microbatch, gradient, s_->place(downstream).chunk);
    return a;
  };
  PackedAction compute = action(kind);
  compute.key = version_;
  if (kind == ActionKind::Forward) {
    if (!first) *out++ = message(ActionKind::RecvActivation, true, false);
    *out++ = compute;
    if (!last) *out++ = message(ActionKind::SendActivation, false, false);
  } else if (kind == ActionKind::Backward) {
    if (!last) *out++ = message(ActionKind::RecvGradient, false, true);
    *out++ = compute;
    if (!first) *out++ = message(ActionKind::SendGradient, true, true);
  } else {
    *out++ = compute;
  }
  return out;
}

// The expansions build actions as values and store each once: writing
// fields through a pointer into the output would make the compiler reload
// the source's own fields after every store (they may alias), and the
// simulator expands some 7 actions per replayed minibatch.

// An action for the current item (minibatch or flush microbatch).
inline PackedAction ActionSource::item_action(ActionKind kind, int64_t index) const {
  PackedAction a;
  a.kind = kind;
  if (flush_) {
    a.item = batch_;
    a.sub = static_cast<int>(index);
  } else {
    a.item = index;
  }
  return a;
}

inline PackedAction ActionSource::message_action(ActionKind kind, int64_t index, bool upstream, bool gradient) const {
  PackedAction a = item_action(kind, index);
  // Unreplicated neighbours (the common case) need no lookup.
  const int fixed = upstream ? prev_rank_ : next_rank_;
  a.peer = fixed >= 0 ? fixed : s_->rank_for(upstream ? stage_ - 1 : stage_ + 1, index);
  a.key = s_->tag(a.item, a.sub, gradient);
  return a;
}

PackedAction* ActionSource::expand_forward(PackedAction* out) {
  const int64_t idx = global_index(forwards_);
  if (!first_) *out++ = message_action(ActionKind::RecvActivation, idx, true, false);
  PackedAction f = item_action(ActionKind::Forward, idx);
  f.key = vertical_ ? s_->vertical_version(stage_, idx) : version_;
  *out++ = f;
  if (!last_) *out++ = message_action(ActionKind::SendActivation, idx, false, false);
  ++forwards_;
  return out;
}

int64_t ActionSource::forward_version(int64_t local) const {
  if (s_->options().kind->never_drains())
    return local < local_count_ * minibatches_ ? s_->options().kind->batch_version(local / local_count_) : -1;
  if (vertical_) return s_->vertical_version(stage_, global_index(local));
  // F(j) runs as soon as at most limit-1 minibatches are in flight, i.e.
  // after max(0, j - (limit-1)) full update rounds (one more for a stage
  // that applies each round one backward late).
  int64_t rounds_before = std::max<int64_t>(0, local - (limit_ - 1) - (lagged_ ? 1 : 0));
  return std::min(minibatches_, rounds_before * replicas_);
}

int64_t ActionSource::backward_version() const {
  if (flush_ || policy_ == WeightPolicy::None) return version_;
  return forward_version(backwards_);  // stash and vertical: B(m) uses F(m)'s version
}

PackedAction* ActionSource::expand_backward(PackedAction* out) {
  const int64_t idx = global_index(backwards_);
  if (lagged_ && backwards_ > 0) out = expand_update(out, 1, false, true);  // the previous round's step, deferred to here
  if (!last_) *out++ = message_action(ActionKind::RecvGradient, idx, false, true);
  PackedAction b = item_action(ActionKind::Backward, idx);
  b.key = backward_version();
  *out++ = b;
  if (!first_) *out++ = message_action(ActionKind::SendGradient, idx, true, true);
  ++backwards_;
  if (!flush_) out = expand_update(out, 1, true, !lagged_ || backwards_ == local_count_);
  return out;
}

PackedAction* ActionSource::expand_update(PackedAction* out, int local_gradients, bool allreduce, bool step) {
  PackedAction u;
  u.key = round_;
  u.peer = local_gradients;
  if (flush_) {
    u.sub = s_->items_per_batch();
    u.item = version_ + 1;
  } else {
    u.sub = static_cast<int>(std::min<int64_t>(replicas_, minibatches_ - round_ * replicas_));
    u.item = std::min(minibatches_, (round_ + 1) * replicas_);
  }
  if (replicas_ > 1 && allreduce) {
    PackedAction a = u;
    a.kind = ActionKind::AllReduce;
    a.item = -1;
    *out++ = a;
  }
  if (!step) return out;
  u.kind = ActionKind::OptimizerStep;
  *out++ = u;
  version_ = u.item;
  ++round_;
  return out;
}

// ---- ActionCursor ----------------------------------------------------------

bool ActionCursor::next(Action& out) {
  if (head_ == buffered_) {
    head_ = 0;
    buffered_ = source_.next_group(buffer_);
    if (buffered_ == 0) return false;
  }
  out = buffer_[head_++].unpack();
  return true;
}

}  // namespace pd
