#include "runtime/tied_gradients.h"

#include <algorithm>

#include "core/error.h"
#include "runtime/schedule/schedule_kind.h"

namespace pd {

bool TiedStages::Group::holds(int stage) const {
  return std::any_of(members.begin(), members.end(), [&](const Member& m) { return m.stage == stage; });
}

void TiedStages::put(int64_t step, int stage, Held grads) {
  board_.erase({step - 2, stage});  // every sibling has read it by then
  board_[{step, stage}] = std::move(grads);
}

const TiedStages::Held* TiedStages::find(int64_t step, int stage) const {
  auto it = board_.find({step, stage});
  return it == board_.end() ? nullptr : &it->second;
}

namespace {

int stage_holding(const Plan& plan, int layer) {
  for (const PlanStage& s : plan.stages)
    if (layer >= s.first_layer && layer <= s.last_layer) return s.index;
  PD_CHECK(false, "no stage of the plan holds layer ", layer);
  return -1;
}

}  // namespace

std::shared_ptr<TiedStages> tied_stages(const Model& m, const Plan& plan, const ScheduleKind* kind) {
  auto out = std::make_shared<TiedStages>();
  for (const TieGroup& g : m.ties) {
    TiedStages::Group group;
    std::vector<ParamSpec> specs;
    for (const TiedTensor& t : g.members) {
      Shape shape;
      for (const ParamSpec& p : m.layer(t.layer).param_specs())
        if (p.name == t.name) shape = p.shape;
      group.members.push_back({stage_holding(plan, t.layer), stored_name(t), shape});
    }
    const bool across = group.members.front().stage != group.members.back().stage;
    if (across) {
      std::string where;
      for (const TiedStages::Member& mem : group.members)
        where += cat(where.empty() ? "" : ", ", mem.stored, " in stage ", mem.stage);
      require_tied_stages_step_together(kind, cat(m.name, " ties one parameter across stages (", where, ")"),
                                        cat("a plan that keeps layers ", g.owner().layer, "-",
                                            g.members.back().layer, " in one stage"));
    }
    if (across) out->bytes += static_cast<size_t>(shape_numel(group.members.front().shape)) * sizeof(float);
    out->groups.push_back(std::move(group));
  }
  return out->groups.empty() ? nullptr : out;
}

TiedGradientExchange::TiedGradientExchange(std::shared_ptr<TiedStages> ties, const Schedule& schedule, int rank,
                                           int chunk, int stage, Transport& transport, ParameterStore& grads)
    : ties_(std::move(ties)), schedule_(schedule), rank_(rank), chunk_(chunk), stage_(stage), transport_(transport),
      grads_(grads) {}

void TiedGradientExchange::start(int64_t step, std::vector<Request>& sends) {
  step_ = step;
  incoming_.clear();
  const int stages = schedule_.stages(), chunks = schedule_.chunks();
  if (chunks > 1) {
    TiedStages::Held mine;
    for (const TiedStages::Group& g : ties_->groups)
      for (const TiedStages::Member& m : g.members)
        if (m.stage == stage_) mine[m.stored] = grads_.param(m.stored).clone();
    ties_->put(step, stage_, std::move(mine));
  }
  // In stage order, then group and member order: the order the senders send in.
  for (int t = 0; t < stages; ++t) {
    if (t == stage_) continue;
    for (const TiedStages::Group& g : ties_->groups) {
      if (!g.holds(stage_) || !g.holds(t)) continue;
      for (const TiedStages::Member& m : g.members) {
        if (m.stage != t) continue;
        Incoming in{t, m.stored, {}, {}};
        if (!local(t)) {
          in.buffer = Tensor::empty(m.shape, DType::F32, grads_.device());
          in.request = transport_.irecv(in.buffer, schedule_.ranks(t).front(), tie_tag(transport_, chunks, chunk_));
        }
        incoming_.push_back(std::move(in));
      }
    }
  }
  if (schedule_.replica_of(rank_) != 0) return;  // replicas hold the same gradients: one sends for all
  const int64_t meta = step * stages + stage_;
  for (int t = 0; t < stages; ++t) {
    if (t == stage_ || local(t)) continue;
    const int their_chunk = t / schedule_.workers();
    for (const TiedStages::Group& g : ties_->groups) {
      if (!g.holds(stage_) || !g.holds(t)) continue;
      for (const TiedStages::Member& m : g.members) {
        if (m.stage != stage_) continue;
        const Tensor grad = grads_.param(m.stored).clone();  // the step writes the sum into the original
        for (int peer : schedule_.ranks(t)) {
          sends.push_back(transport_.isend(grad, peer, tie_tag(transport_, chunks, their_chunk), meta));
          bytes_sent_ += grad.nbytes();
        }
      }
    }
  }
}

bool TiedGradientExchange::arrived() {
  for (Incoming& in : incoming_)
    if (in.buffer.defined() ? !in.request.test() : ties_->find(step_, in.stage) == nullptr) return false;
  return true;
}

void TiedGradientExchange::wait() {
  for (Incoming& in : incoming_)
    if (in.buffer.defined()) in.request.wait();
}

void TiedGradientExchange::finish() {
  const int stages = schedule_.stages();
  for (const TiedStages::Group& g : ties_->groups) {
    if (!g.holds(stage_)) continue;
    std::vector<Tensor> in_order;
    for (const TiedStages::Member& m : g.members) {
      if (m.stage == stage_) {
        in_order.push_back(grads_.param(m.stored));
        continue;
      }
      auto it = std::find_if(incoming_.begin(), incoming_.end(),
                             [&](const Incoming& in) { return in.stage == m.stage && in.stored == m.stored; });
      PD_CHECK(it != incoming_.end(), "stage ", stage_, " expects no gradient of ", m.stored);
      if (it->buffer.defined()) {
        it->request.wait();
        PD_CHECK(it->request.meta() == step_ * stages + m.stage, "stage ", stage_, " at step ", step_,
                 " received the tied gradient ", m.stored, " of step ", it->request.meta() / stages, " from stage ",
                 it->request.meta() % stages);
        in_order.push_back(it->buffer);
      } else {
        const TiedStages::Held* held = ties_->find(step_, m.stage);
        PD_CHECK(held && held->count(m.stored), "stage ", stage_, " lacks ", m.stored, " of stage ", m.stage);
        in_order.push_back(held->at(m.stored));
      }
    }
    const Tensor total = tied_sum(in_order);
    for (const TiedStages::Member& m : g.members)
      if (m.stage == stage_) grads_.param(m.stored).copy_from(total);
  }
  incoming_.clear();
}

}  // namespace pd
