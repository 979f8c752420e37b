// Each worker's predicted memory under a schedule (runtime/simulator/
// worker_memory.h): 1F1B-RR's equals the planner's per-stage figure; a
// flush schedule holds its microbatches' shares of the stash and one
// weight version; recomputed layers keep only their inputs; the messages
// a worker has been sent and not yet received are counted.
#include <gtest/gtest.h>

#include "planner/planner.h"
#include "planner/topology.h"
#include "runtime/simulator/simulator.h"
#include "runtime/simulator/worker_memory.h"
#include "tests/schedule/plans.h"

namespace pd {
namespace {

constexpr double kParams = 4e6, kOptimizer = 4e6, kActivation = 8e6, kWorkspace = 2e6;

Profile chain(uint64_t output_bytes) {
  ProfileNode n;
  n.forward_ms = 10;
  n.backward_ms = 20;
  n.output_bytes = output_bytes;
  n.activation_bytes = uint64_t(kActivation);
  n.parameter_bytes = uint64_t(kParams);
  n.optimizer_state_bytes = uint64_t(kOptimizer);
  n.workspace_bytes = uint64_t(kWorkspace);
  return testing::equal_chain_profile(4, 8, n);
}

Plan straight_plan(const Profile& p, RecomputeMode recompute = RecomputeMode::none) {
  PlannerOptions o;
  o.straight = true;
  o.recompute = recompute;
  return plan_pipeline(p, flat_topology(4, 10), o);
}

std::vector<double> predicted(const Plan& plan, const Profile& p, const ScheduleKind* kind, int microbatches) {
  SimulationOptions o;
  o.schedule.kind = kind;
  o.schedule.microbatches = microbatches;
  o.schedule.minibatches = kind->flushes() ? 3 : 16;
  set_memory_from_profile(o, plan, p);
  return predicted_worker_memory(plan, p, simulate(plan, o));
}

TEST(WorkerMemory, OneFOneBRRIsThePlannersFigure) {
  const Profile p = chain(0);  // nothing crosses a boundary: no messages held
  const Plan plan = straight_plan(p);
  const std::vector<double> bytes = predicted(plan, p, parse_schedule_kind("1f1b-rr"), 1);
  ASSERT_EQ(bytes.size(), 4u);
  for (size_t s = 0; s < 4; ++s) {
    EXPECT_DOUBLE_EQ(bytes[s], double(plan.stages[s].memory_bytes)) << "stage " << s;
    // In-flight 4 - s: that many weight versions and stashes.
    const double in_flight = 4.0 - double(s);
    EXPECT_DOUBLE_EQ(bytes[s], kParams * (in_flight + 1) + kOptimizer + kActivation * in_flight + kWorkspace);
  }
}

// Split B and W (zb-h1): from an item's B to its W a worker keeps what W
// needs (ProfileNode::weight_pass_bytes) in place of the stash; a schedule
// that does not split ignores it.
TEST(WorkerMemory, SplitBackwardHoldsWhatWNeedsFromBToW) {
  const auto replay = [](const Profile& p, const char* schedule) {
    const Plan plan = straight_plan(p);
    SimulationOptions o;
    o.schedule.kind = parse_schedule_kind(schedule);
    o.schedule.microbatches = 4;
    o.schedule.minibatches = 3;
    o.stashed_bytes = stashed_bytes_from_profile(plan, p);
    o.weight_pass_bytes = weight_pass_bytes_from_profile(plan, p);
    return predicted_worker_memory(plan, p, simulate(plan, o));
  };
  const Profile plain = chain(0);
  Profile same = plain, more = plain;
  for (ProfileNode& n : same.nodes) n.weight_pass_bytes = n.activation_bytes;
  for (ProfileNode& n : more.nodes) n.weight_pass_bytes = 3 * n.activation_bytes;
  const std::vector<double> base = replay(plain, "zb-h1"), equal = replay(same, "zb-h1"), larger = replay(more, "zb-h1");
  ASSERT_EQ(larger.size(), 4u);
  for (size_t w = 0; w < 4; ++w) {
    EXPECT_DOUBLE_EQ(equal[w], base[w]) << "worker " << w;  // W keeps the stash: nothing changes
    // At least one item sits between its B and W at the peak: 2 more stashes' worth of a microbatch.
    EXPECT_GE(larger[w], base[w] + 2 * kActivation / 4 - 1) << "worker " << w;
  }
  const std::vector<double> flush = replay(plain, "1f1b-flush"), flush_more = replay(more, "1f1b-flush");
  for (size_t w = 0; w < 4; ++w) EXPECT_DOUBLE_EQ(flush_more[w], flush[w]) << "worker " << w;
}

TEST(WorkerMemory, GpipeHoldsEveryMicrobatchsShareAndOneVersion) {
  const Profile p = chain(0);
  const Plan plan = straight_plan(p);
  const std::vector<double> bytes = predicted(plan, p, parse_schedule_kind("gpipe"), 4);
  // Four microbatches of a quarter each: the whole stash; a quarter of the workspace.
  for (size_t s = 0; s < 4; ++s)
    EXPECT_DOUBLE_EQ(bytes[s], kParams * 2 + kOptimizer + kActivation + kWorkspace / 4) << "stage " << s;
}

TEST(WorkerMemory, RecomputedLayersKeepTheirInputs) {
  const Profile p = chain(0);
  const Plan plain = straight_plan(p), recomputed = straight_plan(p, RecomputeMode::full);
  ASSERT_FALSE(recomputed.stages[0].recompute_layers.empty());
  const std::vector<double> a = predicted(plain, p, parse_schedule_kind("1f1b-flush"), 4);
  const std::vector<double> b = predicted(recomputed, p, parse_schedule_kind("1f1b-flush"), 4);
  // Stage 0 holds 4 microbatches under 1f1b-flush: each saves a quarter
  // of (activation - input), its first layer's input being the data (0),
  // and the recomputation's transient (a quarter of the most one saves) comes back once.
  EXPECT_DOUBLE_EQ(a[0] - b[0], 4 * (kActivation - 0) / 4 - kActivation / 4);
}

// A message sent to a worker is not its memory until its receive takes it:
// the same-host transport leaves it in the shared ring until then
// (runtime/comm/README.md), and the receive comes right before the compute
// it feeds. So under gpipe, whose later stages are sent microbatches while
// they still hold others, boundaries of 3 MB add nothing to any worker's
// predicted peak (the replay used to count them from their send: +3-9 MB).
TEST(WorkerMemory, MessagesNotYetReceivedAreNotTheWorkers) {
  const Plan plan = straight_plan(chain(0));
  const Profile with_messages = chain(3'000'000);
  const Plan sends = straight_plan(with_messages);
  ASSERT_EQ(sends.stages[0].output_bytes, 3'000'000u);
  const std::vector<double> quiet = predicted(plan, chain(0), parse_schedule_kind("gpipe"), 4);
  const std::vector<double> loud = predicted(sends, with_messages, parse_schedule_kind("gpipe"), 4);
  for (size_t s = 0; s < 4; ++s) EXPECT_DOUBLE_EQ(loud[s], quiet[s]) << "stage " << s;
}

// A DAG plan numbers a stage's recomputed layers in its `nodes` order (from
// its first layer), not by profile index: the stage footprints read them
// so, and give back the planner's own per-stage figure under 1F1B-RR
// (PipeDream's vgg16 and gnmt profiles, planned on antichains, every layer
// recomputed).
TEST(WorkerMemory, DagPlansRecomputeTheLayersThePlannerChose) {
  for (const char* model : {"vgg16", "gnmt"}) {
    const Profile p = read_profile(std::string(PD_SOURCE_DIR "/tests/data/pipedream-profiles/") + model + "/graph.txt");
    PlannerOptions o;
    o.straight = true;
    o.recompute = RecomputeMode::full;
    const Plan plan = plan_pipeline(p, flat_topology(4, 4), o);
    ASSERT_EQ(plan.state_space, StateSpaceKind::antichain) << model;
    const std::vector<StageFootprint> f = stage_footprints(plan, p);
    ASSERT_EQ(f.size(), plan.stages.size());
    for (size_t s = 0; s < f.size(); ++s) {
      ASSERT_FALSE(plan.stages[s].recompute_layers.empty()) << model << " stage " << s;
      EXPECT_NEAR(stage_memory_bytes(f[s], plan.stages[s].in_flight), double(plan.stages[s].memory_bytes), 1.0)
          << model << " stage " << s;
    }
  }
}

// The replay prices each compute's working memory at its time: the
// gradient a backward receives counts from its receive, in the backward's
// working memory, and once only. Stage 0
// of two, whose only memory is that gradient (its working memory, nothing
// stashed) and whose backward ends long before the next gradient comes,
// holds one microbatch's gradient at a time.
TEST(WorkerMemory, ReceivedGradientCountsOnce) {
  constexpr double kGradient = 4e6;  // stage 0's output, per minibatch
  ProfileNode n;
  n.output_bytes = uint64_t(kGradient);
  n.workspace_bytes = uint64_t(kGradient);  // its backward's received gradient, nothing more
  Profile p = testing::equal_chain_profile(2, 8, n);
  p.nodes[0].forward_ms = p.nodes[0].backward_ms = p.nodes[1].forward_ms = 1;
  p.nodes[1].backward_ms = 10;  // gradients come every 10 ms, stage 0 takes 1 ms for each
  p.nodes[1].output_bytes = p.nodes[1].workspace_bytes = 0;
  PlannerOptions po;
  po.straight = true;
  const Plan plan = plan_pipeline(p, flat_topology(2, 10), po);
  ASSERT_EQ(plan.stages.size(), 2u);
  for (const char* schedule : {"1f1b-flush", "gpipe"}) {
    const std::vector<double> bytes = predicted(plan, p, parse_schedule_kind(schedule), 4);
    EXPECT_DOUBLE_EQ(bytes[0], kGradient / 4) << schedule;
  }
}

// A fused backward goes down its stage's layers and frees each one's stash
// once done: a bottom layer with a large working memory runs after the
// layers above gave theirs back. The forward is priced with what the
// forward itself allocates (ProfileNode::forward_workspace_bytes), not the
// larger of forward and backward.
TEST(WorkerMemory, ABackwardFreesTheStashOfTheLayersAboveItAsItGoesDown) {
  ProfileNode n;
  n.forward_ms = 10, n.backward_ms = 20;
  n.activation_bytes = 8'000'000;
  n.workspace_bytes = 2'000'000;
  n.forward_workspace_bytes = 1'000'000;
  Profile p = testing::equal_chain_profile(2, 8, n);
  p.nodes[0].workspace_bytes = 10'000'000;  // the bottom layer's backward
  PlannerOptions o;
  o.straight = true;
  const Plan plan = plan_pipeline(p, flat_topology(1, 10), o);
  ASSERT_EQ(plan.stages.size(), 1u);
  const StageFootprint f = stage_footprints(plan, p).at(0);
  EXPECT_DOUBLE_EQ(f.workspace_bytes, 10e6);           // the planner's bound
  EXPECT_DOUBLE_EQ(f.backward_working_bytes, 2e6);     // 10 MB less the top layer's 8 MB, freed
  EXPECT_DOUBLE_EQ(f.forward_working_bytes, 1e6);
  // The replay's peak: the stash and the forward's 1 MB or the backward's 2 MB.
  const std::vector<double> bytes = predicted(plan, p, parse_schedule_kind("1f1b-rr"), 1);
  EXPECT_DOUBLE_EQ(bytes[0], 2 * double(n.parameter_bytes) + 16e6 + 2e6);
}

// A recomputed layer's forward runs again inside the backward, beside the
// gradient the layer received (its output's size): its output and
// temporaries come on top of that gradient, not instead of it.
TEST(WorkerMemory, ARecomputedForwardRunsBesideTheGradientReceived) {
  ProfileNode n;
  n.forward_ms = 10, n.backward_ms = 20;
  n.output_bytes = 4'000'000;            // and so the gradient it receives
  n.activation_bytes = 1'000'000;
  n.workspace_bytes = 5'000'000;         // its backward: that gradient and 1 MB more
  n.forward_workspace_bytes = 3'000'000;
  const Profile p = testing::equal_chain_profile(1, 8, n);
  PlannerOptions o;
  o.straight = true;
  Plan plan = plan_pipeline(p, flat_topology(1, 10), o);
  EXPECT_DOUBLE_EQ(stage_footprints(plan, p).at(0).backward_working_bytes, 5e6);
  plan.stages[0].recompute_layers = {0};
  // 4 MB received + 3 MB of forward, and its 1 MB of activations made again (it keeps no input: the data).
  EXPECT_DOUBLE_EQ(stage_footprints(plan, p).at(0).backward_working_bytes, 8e6);
}

// W allocates little beyond the context B left it (its weight gradient
// accumulates into its buffer): where the profile measured that
// (ProfileNode::weight_workspace_bytes), a W is priced with it, not with
// the layer's backward working memory, whose received gradient W's
// context already holds.
TEST(WorkerMemory, AWeightPassIsPricedWithWhatItAllocatesItself) {
  const auto replay = [](std::optional<uint64_t> weight_workspace) {
    ProfileNode n;
    n.forward_ms = 10, n.backward_ms = 20;
    n.activation_bytes = 1'000'000;
    n.workspace_bytes = 6'000'000;
    n.forward_workspace_bytes = 1;
    n.weight_pass_bytes = 2'000'000;
    n.weight_workspace_bytes = weight_workspace;
    const Profile p = testing::equal_chain_profile(4, 8, n);
    return predicted(straight_plan(p), p, parse_schedule_kind("zb-h1"), 4);
  };
  const std::vector<double> unmeasured = replay(std::nullopt), none = replay(0), more = replay(8'000'000);
  // Per microbatch (a quarter): B works in 1.5 MB on top of the stashes; a
  // W holds its 0.5 MB context where the stash was 0.25 MB. Priced like a
  // B, the W is the peak, 0.25 MB above B's; priced by its own nothing, B
  // is; a W allocating 2 MB is again, 0.75 MB above B's.
  EXPECT_DOUBLE_EQ(unmeasured[3] - none[3], 250'000);
  EXPECT_DOUBLE_EQ(more[3] - none[3], 750'000);
}

// A tensor two neighbours keep (a ReLU's output that the next Linear keeps
// as its input) is one tensor in a stage holding both, two across a cut,
// and two again when the first neighbour is recomputed (it then keeps its
// input instead).
TEST(WorkerMemory, ATensorTwoNeighboursKeepIsHeldOnceInTheirStage) {
  ProfileNode n;
  n.forward_ms = 10, n.backward_ms = 20;
  n.output_bytes = 3'000'000;
  n.activation_bytes = 3'000'000;
  Profile p = testing::equal_chain_profile(2, 8, n);
  p.nodes[1].shared_activation_bytes = 3'000'000;
  PlannerOptions o;
  o.straight = true;
  const Plan together = plan_pipeline(p, flat_topology(1, 10), o);
  ASSERT_EQ(together.stages.size(), 1u);
  EXPECT_DOUBLE_EQ(stage_footprints(together, p).at(0).activation_bytes, 3e6);
  const Plan apart = plan_pipeline(p, flat_topology(2, 10), o);
  ASSERT_EQ(apart.stages.size(), 2u);
  EXPECT_DOUBLE_EQ(stage_footprints(apart, p).at(1).activation_bytes, 3e6);
  Plan first_recomputed = together;
  first_recomputed.stages[0].recompute_layers = {0};
  // Layer 0 keeps its input (the data: 0 bytes) instead; layer 1 its own copy of the output.
  EXPECT_DOUBLE_EQ(stage_footprints(first_recomputed, p).at(0).activation_bytes, 3e6);
  p.nodes[0].activation_bytes = 5'000'000;  // layer 0 keeps more than the shared output
  EXPECT_DOUBLE_EQ(stage_footprints(together, p).at(0).activation_bytes, 5e6);
}

// Where a V schedule turns, a worker sends its first stage's output to its
// second stage: the runtime keeps a copy (LoopbackTransport) from the send
// until the receive takes it, so the replay counts it there - and nowhere
// else, a message to another worker staying with the transport.
TEST(WorkerMemory, AMessageAWorkerSendsItselfIsItsOwnUntilItsReceive) {
  ProfileNode n;
  n.forward_ms = 10, n.backward_ms = 20;
  n.activation_bytes = 1'000'000;
  const auto replay = [&](uint64_t output_bytes) {
    n.output_bytes = output_bytes;
    const Profile p = testing::equal_chain_profile(8, 8, n);
    PlannerOptions o;
    o.straight = true;
    const Plan plan = plan_pipeline(p, flat_topology(8, 10), o);
    SimulationOptions so;
    so.schedule.kind = parse_schedule_kind("zb-v");
    so.schedule.microbatches = 8;
    so.schedule.minibatches = 2;
    set_memory_from_profile(so, plan, p);
    return simulate(plan, so);
  };
  const SimulationReport quiet = replay(0), loud = replay(4'000'000);
  ASSERT_EQ(loud.workers.size(), 4u);
  for (const WorkerReport& w : loud.workers) {
    const uint64_t before = quiet.workers[size_t(w.rank)].peak_activation_bytes;
    if (w.rank == 3) {  // the turn: a microbatch's message (4 MB / 8), at most one each way, taken after its send
      EXPECT_GE(w.peak_activation_bytes, before + 500'000) << "worker 3";
      EXPECT_LE(w.peak_activation_bytes, before + 2 * 500'000) << "worker 3";
    }
    else
      EXPECT_EQ(w.peak_activation_bytes, before) << "worker " << w.rank;
  }
}

}  // namespace
}  // namespace pd
