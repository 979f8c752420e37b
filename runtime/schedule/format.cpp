// Human-readable action lists for `pipedream schedule`.
#include <sstream>

#include "core/error.h"
#include "runtime/schedule/schedule.h"

namespace pd {

namespace {

std::string item(const Action& a, bool flush) {
  std::string chunk = a.chunk > 0 ? cat(" chunk=", a.chunk) : std::string();
  return (flush ? cat("b=", a.minibatch, " mb=", a.microbatch) : cat("m=", a.minibatch)) + chunk;
}

std::string format(const Action& a, bool flush) {
  switch (a.kind) {
    case ActionKind::Forward: return cat("F(", item(a, flush), ", v=", a.weight_version, ")");
    case ActionKind::Backward: return cat("B(", item(a, flush), ", v=", a.weight_version, ")");
    case ActionKind::BackwardWeight: return cat("W(", item(a, flush), ", v=", a.weight_version, ")");
    case ActionKind::SendActivation:
      return cat("send-act(", item(a, flush), ") -> rank ", a.peer, " [tag ", a.tag, "]");
    case ActionKind::RecvActivation:
      return cat("recv-act(", item(a, flush), ") <- rank ", a.peer, " [tag ", a.tag, "]");
    case ActionKind::SendGradient:
      return cat("send-grad(", item(a, flush), ") -> rank ", a.peer, " [tag ", a.tag, "]");
    case ActionKind::RecvGradient:
      return cat("recv-grad(", item(a, flush), ") <- rank ", a.peer, " [tag ", a.tag, "]");
    case ActionKind::AllReduce:
      return cat("allreduce(round ", a.round, ", ", a.gradient_count, " grads, ", a.local_gradients, " local)");
    case ActionKind::OptimizerStep:
      return cat("step(round ", a.round, ", ", a.gradient_count, " grads) -> v=", a.version_created);
  }
  return "?";
}

}  // namespace

std::string format_action(const Action& a, bool flush) { return format(a, flush); }

std::string format_worker_schedule(const Schedule& schedule, int rank, int64_t limit) {
  if (rank < 0 || rank >= schedule.workers())
    throw UserError(cat("worker ", rank, " is not in the plan: ranks are 0..", schedule.workers() - 1));
  const auto& opt = schedule.options();
  const bool flush = is_flush(opt.kind);
  const int s = schedule.stage_of(rank);
  std::ostringstream os;
  os << "# worker " << rank << ": stage " << s << " of " << schedule.stages() << ", replica "
     << schedule.replica_of(rank) << " of " << schedule.replicas(s) << "\n"
     << "# schedule " << to_string(opt.kind);
  if (schedule.chunks() > 1) {
    os << ", " << schedule.chunks() << " virtual stages per worker: stages";
    for (int c = 0; c < schedule.chunks(); ++c) os << " " << schedule.stage_of(rank, c);
  }
  if (flush)
    os << ", " << opt.minibatches << " batches of " << opt.microbatches << " microbatches";
  else
    os << ", weights " << to_string(opt.policy) << ", " << opt.minibatches << " minibatches, NOAM "
       << schedule.noam();
  os << "\n# warm-up " << schedule.warmup(s) << ", in-flight limit " << schedule.in_flight_limit(rank)
     << ", versions count " << (flush ? "batches" : "minibatches") << " absorbed\n";
  ActionCursor c = schedule.cursor(rank);
  Action a;
  int64_t i = 0;
  while (c.next(a)) {
    if (limit > 0 && i >= limit) {
      os << "... (more actions; raise --limit)\n";
      break;
    }
    os << i++ << "\t" << format(a, flush) << "\n";
  }
  return os.str();
}

}  // namespace pd
