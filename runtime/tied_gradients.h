#pragma once
// The tied-gradient exchange (models/ties.h) between the stages that hold
// copies of one tied parameter. At each optimizer step, once a stage's
// gradients are averaged (and all-reduced among its replicas), replica 0
// of the stage sends its members' gradients to every worker of the other
// stages holding the group; each worker adds all members in member order
// (tied_sum) into its copies. `train` adds the same floats in the same
// order, so every synchronous schedule ends at its bits, whatever the
// split; clipping then counts the tensor once (its owner's copy).
//
// The messages go over the run's Transport (MPI, the same-host segment,
// staged or NCCL: device tensors travel as they are), F32 whatever the
// precision, one per member and receiving worker: a stage sends each
// tied gradient it holds once per peer worker per optimizer step. Stages
// of one process (interleaved-1f1b's chunks) hand them over through the
// board of their TiedStages.
//
// Only schedules with one optimizer step per batch on every stage keep the
// copies equal: 1f1b-rr and 2bw with a tie across stages are refused.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/model.h"
#include "models/parameters.h"
#include "planner/plan.h"
#include "runtime/comm/transport.h"
#include "runtime/schedule/schedule.h"

namespace pd {

// A run's tie groups and the stages of their members (a group within one
// stage is summed there, without messages).
struct TiedStages {
  struct Member {
    int stage = 0;
    std::string stored;  // "6.weight"
    Shape shape;
  };
  struct Group {
    std::vector<Member> members;  // member order (ascending layers)
    bool holds(int stage) const;
  };
  std::vector<Group> groups;
  size_t bytes = 0;  // one copy of each tensor tied across stages

  // Stages of one process: each stage's member gradients at a step.
  using Held = std::map<std::string, Tensor>;  // stored name -> gradient
  void put(int64_t step, int stage, Held grads);
  const Held* find(int64_t step, int stage) const;

 private:
  std::map<std::pair<int64_t, int>, Held> board_;
};

// Null when `m` has no tie groups. UserError when one spans two stages of
// `plan` and `kind` steps stages at different times (1f1b-rr, 2bw), naming
// the parameter, its stages and the schedules that work.
std::shared_ptr<TiedStages> tied_stages(const Model& m, const Plan& plan, const ScheduleKind* kind);

// Tags of the exchange, one per receiving chunk, below norm_tag's
// (runtime/executor.h): max_tag - 3 - chunks - chunk.
inline int tie_tag(const Transport& t, int chunks, int chunk) { return t.max_tag() - 3 - chunks - chunk; }

// One executor's side of the exchange.
class TiedGradientExchange {
 public:
  TiedGradientExchange(std::shared_ptr<TiedStages> ties, const Schedule& schedule, int rank, int chunk, int stage,
                       Transport& transport, ParameterStore& grads);
  // The gradients are final but for the ties: sends this stage's (replica
  // 0; their requests join `sends`), posts the receives, hands them to the
  // board for the stages of this process.
  void start(int64_t step, std::vector<Request>& sends);
  bool arrived();  // every other stage's members are in (test only)
  void wait();     // blocks for the other processes' messages (not the board's)
  // Every group's tied sum into this stage's copies.
  void finish();
  size_t bytes_sent() const { return bytes_sent_; }

 private:
  bool local(int stage) const { return schedule_.ranks(stage).front() == rank_; }
  struct Incoming {
    int stage;
    std::string stored;
    Tensor buffer;
    Request request;
  };
  std::shared_ptr<TiedStages> ties_;
  const Schedule& schedule_;
  const int rank_, chunk_, stage_;
  Transport& transport_;
  ParameterStore& grads_;
  int64_t step_ = -1;
  std::vector<Incoming> incoming_;
  size_t bytes_sent_ = 0;
};

}  // namespace pd
