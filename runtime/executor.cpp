#include "runtime/executor.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <string_view>

#include "core/error.h"
#include "core/loss.h"
#include "runtime/clocks.h"
#include "runtime/wire_format.h"

namespace pd {

StageState make_stage_state(const Model& m, int stage, int first_layer, int last_layer, uint64_t seed,
                            const Optimizer& optimizer, Device device) {
  StageState s;
  s.stage = stage;
  s.first_layer = first_layer;
  s.last_layer = last_layer;
  s.weights = ParameterStore::create(m, first_layer, last_layer, seed, device);
  s.optimizer = optimizer.make_state(s.weights.all_params());
  return s;
}

StageExecutor::StageExecutor(const Schedule& schedule, int rank, StageState& state, const StageTraining& training,
                             Transport& transport, ExecutorObserver* observer, int chunk)
    : schedule_(schedule),
      rank_(rank),
      chunk_(chunk),
      stage_(schedule.stage_of(rank, chunk)),
      replica_(schedule.replica_of(rank)),
      replicas_(schedule.replicas(schedule.stage_of(rank))),
      first_stage_(stage_ == 0),
      last_stage_(stage_ == schedule.stages() - 1),
      state_(state),
      training_(training),
      transport_(transport),
      observer_(observer),
      order_(training.train->size(), training.seed),
      cursor_(schedule.cursor(rank)),
      versions_(state.weights, 0) {
  PD_CHECK(state.stage == stage_, "rank ", rank, " runs stage ", stage_, " but holds stage ", state.stage);
  PD_CHECK(training.model && training.train && training.optimizer, "incomplete StageTraining");
  grads_ = state_.weights.zeros_like_params();
  if (first_stage_ && training.loader_threads > 0) prefetch_ = std::make_unique<PrefetchPool>(training.loader_threads);
  tag_modulus_ = transport.max_tag() - 2 - 2 * schedule.chunks();  // below every norm_tag and tie_tag
  if (training.ties)
    ties_ = std::make_unique<TiedGradientExchange>(training.ties, schedule, rank, chunk, stage_, transport, grads_);
  if (replicas_ > 1) group_ = transport.make_group(schedule.ranks(stage_));
  if (gathers_losses())
    for (int r : schedule.ranks(stage_))
      if (r != rank_) loss_sources_.push_back({r, transport.irecv_any(r, loss_tag(transport))});

  if (group_) {
    // Gradients layer by layer in the order backward finishes them.
    std::vector<std::vector<Tensor>> grads_by_layer;
    for (int l = state_.last_layer; l >= state_.first_layer; --l) {
      auto ps = grads_.params(l);
      grads_by_layer.emplace_back(ps.begin(), ps.end());
    }
    buckets_ = std::make_unique<GradientBuckets>(transport, group_, std::move(grads_by_layer),
                                                 training_.bucket_bytes, ReduceOp::Sum);
  }
}

bool StageExecutor::mine(const Action& a) const {
  return schedule_.chunks() == 1 || a.chunk == chunk_ || a.kind == ActionKind::OptimizerStep ||
         a.kind == ActionKind::AllReduce;
}

bool run_chunks(const Schedule& schedule, int rank, const std::vector<StageExecutor*>& chunks,
                bool (*should_stop)()) {
  PD_CHECK(static_cast<int>(chunks.size()) == schedule.chunks(), "rank ", rank, " has ", chunks.size(),
           " executors for ", schedule.chunks(), " chunks");
  // Each executor's next action is the rank's next one of its chunk, so
  // stepping them in the rank's order executes exactly the rank's list.
  auto advance = [&](StageExecutor& ex) {
    for (;;) {
      switch (ex.step()) {
        case StageExecutor::Progress::Executed: return;
        case StageExecutor::Progress::Blocked: ex.wait_until_ready(); break;
        case StageExecutor::Progress::Done: PD_CHECK(false, "rank ", rank, ": a chunk ran out of actions early");
      }
    }
  };
  ActionCursor all = schedule.cursor(rank);
  Action a;
  while (all.next(a)) {
    if (should_stop && should_stop()) return false;
    if (a.kind == ActionKind::OptimizerStep || a.kind == ActionKind::AllReduce) {
      // Clipping: every chunk hands its norms over before any waits for its siblings'.
      if (a.kind == ActionKind::OptimizerStep) {
        for (StageExecutor* ex : chunks) ex->prepare_pending_step();
        for (StageExecutor* ex : chunks) ex->prepare_pending_step(true);  // tied gradients of other ranks
      }
      for (StageExecutor* ex : chunks) advance(*ex);
      // Chunk c's test-set input comes from the rank before (or, for chunk
      // c of rank 0, from chunk c - 1 of the last rank): in chunk order on
      // every rank it arrives in the order it is sent. (The built-in lists
      // start each batch with chunk 0 anyway; a schedule file need not.)
      // Checkpoints likewise: each chunk writes its stage, the last one commits.
      if (a.kind == ActionKind::OptimizerStep) {
        for (StageExecutor* ex : chunks) ex->run_due_checkpoints();
        for (StageExecutor* ex : chunks) ex->run_due_evaluations();
      }
    } else {
      advance(*chunks.at(static_cast<size_t>(a.chunk)));
    }
  }
  for (StageExecutor* ex : chunks) PD_CHECK(ex->step() == StageExecutor::Progress::Done, "rank ", rank, ": a chunk has actions left");
  return true;
}

double StageExecutor::now() const { return steady_seconds() - clock_zero_; }

StageExecutor::SpanStart StageExecutor::span_start() const { return {now(), thread_cpu_seconds()}; }

void StageExecutor::record(const char* name, int64_t item, SpanStart start) {
  const double end = now(), cpu = thread_cpu_seconds() - start.cpu_s;
  if (std::string_view(name) == "wait") {
    stats_.wait_s += end - start.wall_s;
  } else {
    stats_.busy_s += end - start.wall_s;
    stats_.busy_cpu_s += cpu;
  }
  if (trace_) events_.push_back({name, item, start.wall_s, end, cpu});
}

void StageExecutor::fill_window() {
  while (!cursor_done_ && static_cast<int>(window_.size()) < training_.lookahead) {
    Action a;
    if (!cursor_.next(a)) {
      cursor_done_ = true;
      break;
    }
    if (!mine(a)) continue;
    if (a.is_recv())
      recvs_[{a.kind == ActionKind::RecvGradient, item_key(a)}] = transport_.irecv_any(a.peer, wire_tag(a.tag));
    if (prefetch_ && a.kind == ActionKind::Forward)
      prefetch_->submit(item_key(a), [this, a] {
        int64_t epoch = 0;
        const std::vector<int64_t> idx = sample_indices(a.minibatch, a.microbatch, &epoch);
        return training_.train->training_inputs(idx, training_.seed, epoch);
      });
    window_.push_back(a);
  }
}

StageExecutor::Progress StageExecutor::step() {
  if (!loss_sources_.empty()) receive_losses(false);
  fill_window();
  if (checkpoint_due_ && (window_.empty() || !window_.front().is_send())) maybe_checkpoint();
  if (eval_due_ && (window_.empty() || !window_.front().is_send())) maybe_evaluate();
  if (window_.empty()) {
    finish_open_round();
    close_losses();
    reap_sends(true);
    return Progress::Done;
  }
  if (!ready(window_.front())) return Progress::Blocked;
  const Action a = window_.front();
  window_.pop_front();
  fill_window();
  execute(a);
  ++stats_.actions;
  // A sent tensor is freed as soon as its send completes: kept for 8
  // actions, a stage's outputs piled up (cnn's conv1 worker held two of
  // its outputs more than its stash, +100% of its peak).
  reap_sends(false);
  return Progress::Executed;
}

bool StageExecutor::ready(const Action& a) {
  if (a.is_recv()) return recvs_.at({a.kind == ActionKind::RecvGradient, item_key(a)}).test();
  // The AllReduce action only starts the round's buckets; the step waits
  // for them. In between the worker runs its next forward, so a replica a
  // few milliseconds behind its partners costs them nothing: the step's
  // gradients are not touched by a forward (and a backward first ends the
  // round: finish_open_round).
  if (a.kind == ActionKind::OptimizerStep) {
    if (round_open_ && !buckets_->test()) return false;
    if (!exchanges_norms() && !ties_) return true;
    prepare_step(a);
    return step_prepared_ && (!exchanges_norms() || norms_arrived());
  }
  return true;
}

void StageExecutor::wait_until_ready() {
  if (window_.empty()) return;
  const Action& a = window_.front();
  const SpanStart t0 = span_start();
  if (a.is_recv()) {
    recvs_.at({a.kind == ActionKind::RecvGradient, item_key(a)}).wait();
  } else if (a.kind == ActionKind::OptimizerStep) {
    if (round_open_) buckets_->wait();
    if (ties_) {
      prepare_step(a);
      ties_->wait();
      prepare_step(a);
    }
    if (exchanges_norms()) {
      prepare_step(a);
      for (Request& r : norm_recvs_) r.wait();
    }
  }
  record("wait", a.is_recv() ? item_key(a) : -1, t0);
}

bool StageExecutor::run(bool (*should_stop)()) {
  for (;;) {
    if (should_stop && should_stop()) return false;
    switch (step()) {
      case Progress::Done: return true;
      case Progress::Blocked: wait_until_ready(); break;
      case Progress::Executed: break;
    }
  }
}

void StageExecutor::execute(const Action& a) {
  const int64_t key = item_key(a);
  switch (a.kind) {
    case ActionKind::RecvActivation: {
      auto it = recvs_.find({false, key});
      Pending& p = pending_[key];
      p.input = unpack_from_wire(it->second.tensor());
      p.meta = it->second.meta();
      recvs_.erase(it);
      if (schedule_.options().policy == WeightPolicy::Vertical) {
        const int64_t want = schedule_.input_version(a.minibatch);
        if (p.meta != want)
          throw RuntimeFailure(cat("vertical sync: rank ", rank_, " received minibatch ", a.minibatch,
                                   " from rank ", a.peer, " tagged with weight version ", p.meta,
                                   " but the schedule expects version ", want));
      }
      break;
    }
    case ActionKind::RecvGradient: {
      auto it = recvs_.find({true, key});
      pending_[key].grad_in = unpack_from_wire(it->second.tensor());
      recvs_.erase(it);
      break;
    }
    case ActionKind::Forward: forward(a); break;
    case ActionKind::Backward: backward(a); break;
    case ActionKind::BackwardWeight: backward_weight(a); break;
    case ActionKind::SendActivation: {
      Pending& p = pending_.at(key);
      send(p.output, a.peer, wire_tag(a.tag), p.meta);
      p.output = Tensor{};
      break;
    }
    case ActionKind::SendGradient: {
      auto it = pending_.find(key);
      PD_CHECK(it != pending_.end() && it->second.grad_out.defined(), "no gradient to send for item ", key);
      send(it->second.grad_out, a.peer, wire_tag(a.tag), a.minibatch);
      it->second.grad_out = Tensor{};
      if (!it->second.awaiting_w) pending_.erase(it);
      break;
    }
    case ActionKind::AllReduce: all_reduce(a); break;
    case ActionKind::OptimizerStep: optimizer_step(a); break;
  }
}

std::vector<int64_t> StageExecutor::sample_indices(int64_t minibatch, int microbatch, int64_t* epoch) const {
  const int64_t n = training_.train->size(), b = training_.batch;
  const int64_t g = training_.first_item + minibatch;
  // Batch g of M microbatches is the sample range a batch of M*b takes
  // (1f1b-rr: M = 1, microbatch 0, so minibatch g).
  const int64_t mb = b * schedule_.items_per_batch();
  const int64_t per_epoch = n / mb;
  *epoch = g / per_epoch;
  return order_.positions(g / per_epoch, (g % per_epoch) * mb + microbatch * b, b);
}

// The RNG key of an item's F, B and W (dropout masks): its global step and
// microbatch (1f1b-rr: M = 1, microbatch 0).
StepInfo StageExecutor::training_step(const Action& a) const {
  const uint64_t id = static_cast<uint64_t>(global_step(a) * schedule_.items_per_batch() + a.microbatch);
  return StepInfo{.training = true, .seed = training_.seed, .layer_index = 0, .minibatch_id = id,
                  .precision = training_.precision};
}

void StageExecutor::forward(const Action& a) {
  const SpanStart t0 = span_start();
  const int64_t key = item_key(a);
  Pending& p = pending_[key];
  Tensor x;
  std::vector<int64_t> idx;
  int64_t epoch = 0;
  const double fetch_start = steady_seconds();
  if (first_stage_ || last_stage_) idx = sample_indices(a.minibatch, a.microbatch, &epoch);
  if (first_stage_) {
    // Forwards re-run on resume (rebuild_in_flight) were never submitted.
    x = prefetch_ && prefetch_->submitted(key) ? prefetch_->take(key)
                                               : training_.train->training_inputs(idx, training_.seed, epoch);
    stats_.data_s += steady_seconds() - fetch_start;
  } else {
    PD_CHECK(p.input.defined(), "forward of item ", key, " before its activation arrived");
    x = std::move(p.input);
    p.input = Tensor{};
  }
  const ParameterStore& w = versions_.get(a.weight_version);
  StepInfo info = training_step(a);
  info.output_to_loss = last_stage_;
  p.ctx.recompute = state_.recompute;
  Tensor y = forward_layers(*training_.model, w, state_.first_layer, state_.last_layer, x, info, p.ctx);
  pack_stash(p.ctx);
  p.version = a.weight_version;
  if (schedule_.options().policy != WeightPolicy::None) {  // (only 1f1b-rr takes another policy)
    versions_.pin(a.weight_version);
    p.pinned = true;
  }
  if (first_stage_) p.meta = a.weight_version;
  if (record_versions_) forward_versions_.emplace_back(a.minibatch, a.weight_version);
  if (last_stage_) {
    const double labels_start = steady_seconds();
    Tensor labels = training_.train->labels(idx);
    stats_.data_s += steady_seconds() - labels_start;
    LossResult r = softmax_cross_entropy(std::move(y), labels);
    require_finite_loss(r.loss, global_step(a));
    p.grad_in = std::move(r.grad);
    report_loss(global_step(a), a.microbatch, {r.loss, r.correct, r.count});
  } else {
    p.output = std::move(y);
  }
  ++forwards_done_;
  size_t held = 0;
  for (const auto& [k, q] : pending_) held += q.ctx.saved_bytes();
  stats_.peak_context_bytes = std::max(stats_.peak_context_bytes, held);
  record("F", key, t0);
}

// A loss message: [step, microbatch, the loss's bits, correct, count];
// step -1 closes the sender's stream.
void StageExecutor::report_loss(int64_t step, int microbatch, const StepLoss& loss) {
  if (!sends_losses()) {
    if (observer_) observer_->on_loss(step, microbatch, loss);
    return;
  }
  Tensor msg = Tensor::empty({5}, DType::I64);
  int64_t* m = msg.data<int64_t>();
  uint32_t bits = 0;
  std::memcpy(&bits, &loss.loss, sizeof bits);
  m[0] = step;
  m[1] = microbatch;
  m[2] = bits;
  m[3] = loss.correct;
  m[4] = loss.count;
  sends_.push_back(transport_.isend(msg, training_.loss_reporter, loss_tag(transport_)));
}

void StageExecutor::close_losses() {
  if (losses_closed_) return;
  losses_closed_ = true;
  if (sends_losses()) {
    Tensor end = Tensor::zeros({5}, DType::I64);
    end.data<int64_t>()[0] = -1;
    sends_.push_back(transport_.isend(end, training_.loss_reporter, loss_tag(transport_)));
  }
  if (!loss_sources_.empty()) receive_losses(true);
}

void StageExecutor::receive_losses(bool until_closed) {
  for (LossSource& s : loss_sources_) {
    while (!s.closed) {
      if (until_closed) s.next.wait();
      else if (!s.next.test()) break;
      const Tensor t = s.next.tensor();
      PD_CHECK(t.dtype() == DType::I64 && t.numel() == 5, "rank ", rank_, ": malformed loss message from rank ",
               s.rank);
      const int64_t* m = t.data<int64_t>();
      if (m[0] < 0) {
        s.closed = true;
        break;
      }
      StepLoss loss{0, m[3], m[4]};
      const uint32_t bits = static_cast<uint32_t>(m[2]);
      std::memcpy(&loss.loss, &bits, sizeof bits);
      observer_->on_loss(m[0], static_cast<int>(m[1]), loss);
      s.next = transport_.irecv_any(s.rank, loss_tag(transport_));
    }
  }
}

bool StageExecutor::round_completes_after(size_t i) const {
  for (; i < window_.size(); ++i) {
    const ActionKind k = window_[i].kind;
    if (k == ActionKind::AllReduce) return true;
    if (k == ActionKind::Forward || k == ActionKind::Backward) return false;
  }
  return false;
}

void StageExecutor::backward(const Action& a) {
  finish_open_round();  // its gradients accumulate into the ones in flight
  const SpanStart t0 = span_start();
  const int64_t key = item_key(a);
  Pending& p = pending_.at(key);
  PD_CHECK(p.grad_in.defined(), "backward of item ", key, " without its gradient");
  if (p.pinned)
    PD_CHECK(a.weight_version == p.version, "backward of item ", key, " on version ", a.weight_version,
             " but its forward used ", p.version);
  const ParameterStore& w = versions_.get(a.weight_version);
  const StepInfo info = training_step(a);
  const Model& m = *training_.model;
  unpack_stash(p.ctx);
  Tensor dx;
  if (buckets_ && buckets_->bucket_count() > 0 && round_completes_after(0)) {
    // This backward completes the round: send each bucket as soon as its layers are done.
    Tensor g = std::move(p.grad_in);
    const int lowest = first_stage_ ? first_layer_with_params(m, state_.first_layer, state_.last_layer)
                                    : state_.first_layer;
    for (int l = state_.last_layer; l >= lowest; --l) {
      RangeContext one;
      one.unpack_layer = p.ctx.unpack_layer;
      one.layers.push_back(std::move(p.ctx.layers[static_cast<size_t>(l - state_.first_layer)]));
      if (!p.ctx.dropped.empty()) one.dropped.push_back(std::move(p.ctx.dropped[static_cast<size_t>(l - state_.first_layer)]));
      g = backward_layers(m, w, grads_, l, l, g, info, one, !first_stage_ || l > lowest);
      buckets_->layer_done(static_cast<size_t>(state_.last_layer - l));
    }
    p.ctx.clear();
    dx = g;
  } else if (schedule_.has_weight_passes()) {
    // A W of this item follows: the input gradient now, the weight
    // gradient at W (ctx keeps what it needs; layers that do not split add
    // theirs here).
    dx = backward_input_layers(m, w, grads_, state_.first_layer, state_.last_layer, p.grad_in, info, p.ctx,
                               !first_stage_);
    pack_stash(p.ctx);
    p.awaiting_w = true;
  } else {
    dx = backward_layers(m, w, grads_, state_.first_layer, state_.last_layer, p.grad_in, info, p.ctx, !first_stage_);
  }
  p.grad_in = Tensor{};
  if (p.pinned && !p.awaiting_w) {
    versions_.unpin(p.version);
    versions_.release(oldest_needed());
  }
  if (first_stage_ && !p.awaiting_w) pending_.erase(key);
  else if (!first_stage_) p.grad_out = std::move(dx);
  record("B", key, t0);
}

void StageExecutor::backward_weight(const Action& a) {
  finish_open_round();
  const SpanStart t0 = span_start();
  const int64_t key = item_key(a);
  auto it = pending_.find(key);
  PD_CHECK(it != pending_.end() && it->second.awaiting_w, "W of item ", key, " without its B");
  Pending& p = it->second;
  PD_CHECK(a.weight_version == p.version, "W of item ", key, " on version ", a.weight_version, " but its forward used ",
           p.version);
  const StepInfo info = training_step(a);
  unpack_stash(p.ctx);
  backward_weights_layers(*training_.model, versions_.get(a.weight_version), grads_, state_.first_layer,
                          state_.last_layer, info, p.ctx);
  p.awaiting_w = false;
  if (p.pinned) {
    versions_.unpin(p.version);
    versions_.release(oldest_needed());
  }
  if (!p.grad_out.defined()) pending_.erase(it);  // its gradient is sent (or the first stage sends none)
  record("W", key, t0);
}

void StageExecutor::all_reduce(const Action& a) {
  const SpanStart t0 = span_start();
  if (buckets_) {
    buckets_->start_all();  // the buckets the backward did not start
    round_open_ = true;
  }
  record("allreduce", a.round, t0);
}

void StageExecutor::finish_open_round() {
  if (!round_open_) return;
  buckets_->end_round();
  round_open_ = false;
}

int64_t StageExecutor::oldest_needed() const {
  return schedule_.oldest_version_needed(stage_, replica_, forwards_done_);
}

void StageExecutor::prepare_step(const Action& a) {
  if (step_prepared_) return;
  if (!averaged_) {
    finish_open_round();  // done already when ready() said so
    average_gradients(grads_.all_params(), a.gradient_count);
    averaged_ = true;
    if (ties_) ties_->start(state_.updates, sends_);
  }
  if (ties_) {
    if (!ties_->arrived()) return;
    ties_->finish();
    stats_.tied_bytes = ties_->bytes_sent();
  }
  step_prepared_ = true;
  if (training_.clip_grad_norm <= 0) return;
  norm_squares_ = squared_norms(grads_.params_counted_once());
  if (!exchanges_norms()) return;
  // meta: which step and stage the norms are, checked on arrival.
  const int stages = schedule_.stages();
  const int64_t meta = state_.updates * stages + stage_;
  if (training_.local_norms) training_.local_norms->put(state_.updates, stage_, norm_squares_);
  for (int t = 0; t < stages; ++t)
    if (t != stage_ && !local_stage(t))
      norm_recvs_.push_back(transport_.irecv_any(schedule_.ranks(t).front(), norm_tag(transport_, chunk_)));
  if (replica_ != 0) return;  // replicas hold the same gradients: one sends for all
  // [count, the doubles' bits...]: never empty, though a stage may have no parameters.
  const int64_t count = static_cast<int64_t>(norm_squares_.size());
  Tensor msg = Tensor::empty({1 + count}, DType::I64);
  msg.data<int64_t>()[0] = count;
  std::memcpy(msg.data<int64_t>() + 1, norm_squares_.data(), norm_squares_.size() * sizeof(double));
  for (int t = 0; t < stages; ++t) {
    if (t == stage_ || local_stage(t)) continue;
    const int chunk = schedule_.place(t).chunk;
    for (int peer : schedule_.ranks(t)) sends_.push_back(transport_.isend(msg, peer, norm_tag(transport_, chunk), meta));
  }
}

void StageExecutor::prepare_pending_step(bool wait_for_ties) {
  fill_window();
  // ready() prepares the step once its all-reduce is done; whether the
  // other stages' norms are in yet does not matter here.
  if (window_.empty() || window_.front().kind != ActionKind::OptimizerStep) return;
  (void)ready(window_.front());
  if (wait_for_ties && ties_ && averaged_ && !step_prepared_) {
    ties_->wait();
    (void)ready(window_.front());
  }
}

bool StageExecutor::norms_arrived() {
  for (Request& r : norm_recvs_)
    if (!r.test()) return false;
  for (int t = 0; t < schedule_.stages(); ++t)
    if (t != stage_ && local_stage(t) && !training_.local_norms->find(state_.updates, t)) return false;
  return true;
}

// Every stage's squared norms in hand, each stage scales by the same norm.
void StageExecutor::clip_gradients() {
  const int stages = schedule_.stages();
  std::vector<bool> seen(static_cast<size_t>(stages), false);
  seen[static_cast<size_t>(stage_)] = true;
  for (Request& r : norm_recvs_) {
    r.wait();
    const int64_t step = r.meta() / stages, from = r.meta() % stages;
    PD_CHECK(step == state_.updates && !seen[static_cast<size_t>(from)], "stage ", stage_, " at step ",
             state_.updates, " received the gradient norms of stage ", from, " at step ", step);
    seen[static_cast<size_t>(from)] = true;
    const Tensor t = r.tensor();
    PD_CHECK(t.dtype() == DType::I64 && t.numel() >= 1 && t.data<int64_t>()[0] == t.numel() - 1,
             "stage ", stage_, ": malformed gradient norms from stage ", from);
    const size_t n = norm_squares_.size(), more = static_cast<size_t>(t.numel() - 1);
    norm_squares_.resize(n + more);
    std::memcpy(norm_squares_.data() + n, t.data<int64_t>() + 1, more * sizeof(double));
  }
  norm_recvs_.clear();
  for (int t = 0; t < stages; ++t) {
    if (t == stage_ || !local_stage(t)) continue;
    const std::vector<double>* theirs = training_.local_norms->find(state_.updates, t);
    PD_CHECK(theirs && !seen[static_cast<size_t>(t)], "stage ", stage_, " at step ", state_.updates,
             " lacks the gradient norms of stage ", t, " in this process");
    seen[static_cast<size_t>(t)] = true;
    norm_squares_.insert(norm_squares_.end(), theirs->begin(), theirs->end());
  }
  PD_CHECK(std::count(seen.begin(), seen.end(), true) == stages, "stage ", stage_, " at step ", state_.updates,
           " is missing a stage's gradient norms");
  const double norm = global_norm(std::move(norm_squares_));
  norm_squares_.clear();
  const float factor = clip_to_norm(grads_.all_params(), norm, training_.clip_grad_norm);
  if (observer_ && last_stage_ && replica_ == 0)
    observer_->on_grad_norm(training_.first_item + versions_.newest_version(), norm, factor);
}

void StageExecutor::optimizer_step(const Action& a) {
  const SpanStart t0 = span_start();
  prepare_step(a);
  if (!step_prepared_) {  // ready() said so, unless the caller did not ask it
    ties_->wait();
    prepare_step(a);
    PD_CHECK(step_prepared_, "stage ", stage_, ": the tied gradients of this process's other stages are missing");
  }
  if (training_.clip_grad_norm > 0) clip_gradients();
  step_prepared_ = false;
  averaged_ = false;
  // The LR schedule counts minibatches absorbed (flush: batches), the same
  // index on every stage whatever its replication.
  const float lr = training_.lr.lr_at(training_.first_item + versions_.newest_version());
  versions_.update(a.version_created, oldest_needed(), [&](std::span<const Tensor> from, std::span<Tensor> to) {
    training_.optimizer->step_into(from, to, grads_.all_params(), state_.optimizer, lr);
  });
  ++state_.updates;
  grads_.zero_params();
  stats_.peak_versions = std::max(stats_.peak_versions, versions_.peak_versions());
  if (eval_.test && next_eval_ < eval_.at_versions.size() && versions_.newest_version() >= eval_.at_versions[next_eval_])
    eval_due_ = true;
  if (next_checkpoint_ < checkpoint_at_.size() && versions_.newest_version() >= checkpoint_at_[next_checkpoint_])
    checkpoint_due_ = true;
  record("step", a.round, t0);
}

void StageExecutor::maybe_checkpoint() {
  checkpoint_due_ = false;
  while (next_checkpoint_ < checkpoint_at_.size() && versions_.newest_version() >= checkpoint_at_[next_checkpoint_]) {
    PD_CHECK(versions_.newest_version() == checkpoint_at_[next_checkpoint_], "stage ", stage_, " passed version ",
             checkpoint_at_[next_checkpoint_], " without stopping there for its checkpoint");
    write_checkpoint_(checkpoint_at_[next_checkpoint_], versions_);
    ++next_checkpoint_;
  }
}

namespace {

// What a rank did before its checkpoint at `version` (1f1b-rr: right after
// the optimizer step creating it and the sends that follow), for the
// minibatches still open there. Every minibatch below `version` is through
// its backward by then and none above is (checked), so what is open is at
// most the minibatches in flight: a summary that stays small however long
// the run.
struct BeforeCheckpoint {
  size_t actions = 0;
  std::map<int64_t, Action> forwards, receives, sends;  // of minibatches not through backward
};

BeforeCheckpoint before_checkpoint(const Schedule& schedule, int rank, int64_t version) {
  BeforeCheckpoint b;
  std::set<int64_t> gradients;  // received, backward not yet run
  ActionCursor c = schedule.cursor(rank);
  Action a;
  bool after_step = false;
  while (c.next(a)) {
    if (after_step && !a.is_send()) break;
    ++b.actions;
    switch (a.kind) {
      case ActionKind::Forward: b.forwards[a.minibatch] = a; break;
      case ActionKind::RecvActivation: b.receives[a.minibatch] = a; break;
      case ActionKind::SendActivation: b.sends[a.minibatch] = a; break;
      case ActionKind::RecvGradient: gradients.insert(a.minibatch); break;
      case ActionKind::Backward:
        PD_CHECK(a.minibatch < version, "rank ", rank, ": backward of minibatch ", a.minibatch,
                 " before its checkpoint at version ", version);
        b.forwards.erase(a.minibatch);
        b.receives.erase(a.minibatch);
        b.sends.erase(a.minibatch);
        gradients.erase(a.minibatch);
        break;
      case ActionKind::OptimizerStep: after_step = after_step || a.version_created == version; break;
      default: break;
    }
  }
  PD_CHECK(after_step, "rank ", rank, " never reaches weight version ", version);
  PD_CHECK(gradients.empty(), "rank ", rank, ": a gradient received before the checkpoint is used after it");
  for (const auto& [m, f] : b.forwards)
    PD_CHECK(m >= version, "rank ", rank, ": minibatch ", m, " not through backward at its checkpoint ", version);
  return b;
}

}  // namespace

void StageExecutor::resume_at(int64_t version, std::map<int64_t, ParameterStore> older) {
  PD_CHECK(schedule_.chunks() == 1 && stats_.actions == 0,
           "resume_at: a 1f1b-rr stage before its first action");
  const BeforeCheckpoint mine = before_checkpoint(schedule_, rank_, version);
  versions_.restore(version, std::move(older));
  // Recomputing must not count twice in the BatchNorm statistics nor report losses again.
  std::vector<Tensor> buffers;
  for (const Tensor& b : state_.weights.all_buffers()) buffers.push_back(b.clone());
  ExecutorObserver* observer = observer_;
  observer_ = nullptr;
  rebuild_in_flight(mine.forwards, mine.receives, mine.sends, version);
  observer_ = observer;
  for (size_t i = 0; i < buffers.size(); ++i) {
    Tensor live = state_.weights.all_buffers()[i];  // a handle on the shared storage
    live.copy_from(buffers[i]);
  }
  // Every forward before the checkpoint: those of minibatches below it, and the open ones.
  forwards_done_ = static_cast<int64_t>(mine.forwards.size());
  for (int64_t m = replica_; m < version; m += replicas_) ++forwards_done_;
  for (size_t i = 0; i < mine.actions; ++i) {
    Action skipped;
    cursor_.next(skipped);
  }
  while (next_eval_ < eval_.at_versions.size() && eval_.at_versions[next_eval_] <= version) ++next_eval_;
  while (next_checkpoint_ < checkpoint_at_.size() && checkpoint_at_[next_checkpoint_] <= version) ++next_checkpoint_;
}

void StageExecutor::rebuild_in_flight(const std::map<int64_t, Action>& forwards,
                                      const std::map<int64_t, Action>& receives,
                                      const std::map<int64_t, Action>& sends, int64_t version) {
  // Activations this stage received before the checkpoint, in minibatch
  // order: the previous stage sends them again as it rebuilds.
  std::set<int64_t> open;
  for (const auto& [m, a] : forwards) open.insert(m);
  for (const auto& [m, a] : receives) open.insert(m);
  std::map<int, BeforeCheckpoint> previous;  // by rank
  for (int64_t m : open) {
    const int64_t key = item_key(Action{.kind = ActionKind::Forward, .minibatch = m});
    if (!first_stage_) {
      const Action& r = receives.at(m);
      auto it = previous.find(r.peer);
      if (it == previous.end()) it = previous.emplace(r.peer, before_checkpoint(schedule_, r.peer, version)).first;
      PD_CHECK(it->second.sends.count(m), "rank ", rank_, ": minibatch ", m,
               " was received before the checkpoint but sent after the previous stage's");
      Request req = transport_.irecv_any(r.peer, wire_tag(r.tag));
      req.wait();
      Pending& p = pending_[key];
      p.input = unpack_from_wire(req.tensor());
      p.meta = req.meta();
    }
    if (!forwards.count(m)) continue;  // its forward comes after the checkpoint
    forward(forwards.at(m));
    // Sent before the checkpoint: the next stage has not run its backward
    // (open minibatches are at or above `version`), so it needs it again.
    if (sends.count(m)) {
      Pending& p = pending_.at(key);
      send(p.output, sends.at(m).peer, wire_tag(sends.at(m).tag), p.meta);
      p.output = Tensor{};
    }
  }
}

void StageExecutor::maybe_evaluate() {
  eval_due_ = false;
  while (next_eval_ < eval_.at_versions.size() && versions_.newest_version() >= eval_.at_versions[next_eval_]) {
    evaluate(eval_.at_versions[next_eval_]);
    ++next_eval_;
  }
}

void StageExecutor::evaluate(int64_t version) {
  if (replica_ != 0) return;
  const SpanStart t0 = span_start();
  const Dataset& d = *eval_.test;
  const int prev = first_stage_ ? -1 : schedule_.ranks(stage_ - 1)[0];
  const int next = last_stage_ ? -1 : schedule_.ranks(stage_ + 1)[0];
  double loss_sum = 0;
  int64_t correct = 0, count = 0;
  std::vector<int64_t> idx;
  for (int64_t first = 0; first < d.size(); first += eval_.batch) {
    const int64_t n = std::min(eval_.batch, d.size() - first);
    idx.resize(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) idx[static_cast<size_t>(i)] = first + i;
    Tensor x;
    if (first_stage_) {
      x = d.inputs(idx);
    } else {
      Request r = transport_.irecv_any(prev, eval_tag(transport_));
      r.wait();
      x = unpack_from_wire(r.tensor());
    }
    RangeContext ctx;
    StepInfo info{.training = false, .precision = training_.precision};
    Tensor y = forward_layers(*training_.model, state_.weights, state_.first_layer, state_.last_layer, x, info, ctx);
    if (last_stage_) {
      LossResult r = softmax_cross_entropy(y, d.labels(idx), false);
      loss_sum += static_cast<double>(r.loss) * static_cast<double>(r.count);
      correct += r.correct;
      count += r.count;
    } else {
      send(y, next, eval_tag(transport_), version);
    }
  }
  if (last_stage_ && observer_) {
    EvalResult res;
    res.count = count;
    if (count > 0) {
      res.loss = loss_sum / static_cast<double>(count);
      res.accuracy = static_cast<double>(correct) / static_cast<double>(count);
    }
    observer_->on_eval(version, res);
  }
  record("eval", version, t0);
}

// bf16 on the host: the stash packed between a minibatch's passes (wire_format.h).
void StageExecutor::pack_stash(RangeContext& ctx) const {
  if (training_.precision != Precision::BF16 || !state_.weights.device().is_cpu()) return;
  for (LayerContext& c : ctx.layers) pack_saved_bf16(c);
}

// Unpacked a layer at a time, as the backward reaches it (RangeContext::unpack_layer).
void StageExecutor::unpack_stash(RangeContext& ctx) const {
  if (training_.precision != Precision::BF16 || !state_.weights.device().is_cpu()) return;
  ctx.unpack_layer = &unpack_saved_bf16;
}

void StageExecutor::send(const Tensor& t, int peer, int tag, int64_t meta) {
  // NCCL moves device tensors only, and packing happens on the host: there
  // bf16 values travel as F32 (a device-side packing kernel would halve them too).
  const bool device_to_device = t.defined() && t.device().is_cuda() && transport_.name() == "nccl";
  const Tensor wire = device_to_device ? t : pack_for_wire(t, training_.precision);
  stats_.sent_bytes += wire.nbytes();
  sends_.push_back(transport_.isend(wire, peer, tag, meta));
}

void StageExecutor::reap_sends(bool all) {
  if (all) {
    for (Request& r : sends_) r.wait();
    sends_.clear();
    return;
  }
  std::erase_if(sends_, [](Request& r) { return r.test(); });
}

}  // namespace pd
