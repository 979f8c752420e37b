// The schedules PipeDream started with, and those of the papers it led to
// (schedule.h's comment says what each one's order and versions are).
#include <algorithm>

#include "core/error.h"
#include "runtime/schedule/schedule.h"

namespace pd {
namespace {

// PipeDream: asynchronous, replicas take minibatches round-robin.
class OneFOneBRoundRobin final : public ScheduleKind {
 public:
  const char* name() const override { return "1f1b-rr"; }
  const char* help() const override {
    return "PipeDream: asynchronous 1F1B, minibatches round-robin over replicas (--weights stash|vertical|none)";
  }
  bool flushes() const override { return false; }
  bool takes_weight_policy() const override { return true; }
};

class GPipe final : public ScheduleKind {
 public:
  const char* name() const override { return "gpipe"; }
  const char* help() const override { return "all forwards of a batch, then all backwards, one step per batch"; }
  // 1f1b-flush runs the same batches as fast with less memory held.
  bool searched() const override { return false; }
  // All of the batch's microbatches (this replica's share) at once.
  int64_t in_flight_limit(const Schedule& s, int rank) const override {
    const int64_t r = s.replicas(s.stage_of(rank)), k = s.replica_of(rank), n = s.options().microbatches;
    return std::max<int64_t>(1, (n - k + r - 1) / r);
  }
};

class OneFOneBFlush final : public ScheduleKind {
 public:
  const char* name() const override { return "1f1b-flush"; }
  const char* help() const override { return "synchronous 1F1B on batches of M microbatches (PipeDream-Flush)"; }
};

// Zero bubble H1 (Qi et al. ICLR 2024).
class ZeroBubbleH1 final : public ScheduleKind {
 public:
  const char* name() const override { return "zb-h1"; }
  const char* help() const override {
    return "zero bubble H1: backward split into B and W, W's delayed to fill the drain (unreplicated)";
  }
  bool splits_backward() const override { return true; }
  bool unreplicated_only() const override { return true; }
  // Stage s: min(S - s, M) warm-up forwards, then B(j), W(j - s), F(j + S - s).
  std::vector<std::vector<OrderEntry>> worker_orders(const Schedule& sch) const override {
    const int S = sch.stages(), M = sch.options().microbatches;
    std::vector<std::vector<OrderEntry>> order(static_cast<size_t>(sch.workers()));
    for (int s = 0; s < S; ++s) {
      auto& o = order[static_cast<size_t>(sch.ranks(s)[0])];
      for (int k = 0; k < std::min(S - s, M); ++k) o.push_back({ActionKind::Forward, k, 0});
      for (int j = 0; j < M; ++j) {
        o.push_back({ActionKind::Backward, j, 0});
        if (j >= s) o.push_back({ActionKind::BackwardWeight, j - s, 0});  // W delayed by s microbatches
        if (j + S - s < M) o.push_back({ActionKind::Forward, j + S - s, 0});
      }
      for (int k = std::max(0, M - s); k < M; ++k) o.push_back({ActionKind::BackwardWeight, k, 0});
    }
    return order;
  }
  // The pipeline's peak, stage 0's 1F1B bound, on every stage.
  int64_t held_limit(const Schedule& sch, int) const override { return sch.stages(); }
};

// Interleaved 1F1B (Narayanan et al. SC21, Megatron-LM).
class Interleaved final : public ScheduleKind {
 public:
  const char* name() const override { return "interleaved-1f1b"; }
  const char* help() const override {
    return "Megatron's interleaving: --virtual-stages v stages per worker, round robin (unreplicated)";
  }
  bool takes_virtual_stages() const override { return true; }
  bool unreplicated_only() const override { return true; }
  int microbatch_multiple(int workers) const override { return workers; }
  // Megatron's warm-up; v = 1 is plain 1F1B's.
  static int warmup(const Schedule& sch, int w) {
    const int S = sch.workers(), v = sch.chunks(), M = sch.options().microbatches;
    const int64_t total = int64_t{v} * M;
    int64_t warm = v == 1 ? S - 1 - w : 2 * (S - 1 - w) + (v - 1) * S;
    if (M == S && v > 1) warm = total;
    return static_cast<int>(std::min(total, warm));
  }
  int64_t in_flight_limit(const Schedule& sch, int rank) const override {
    return std::min<int64_t>(int64_t{sch.chunks()} * sch.options().microbatches, warmup(sch, rank) + 1);
  }
  int64_t held_limit(const Schedule& sch, int rank) const override { return in_flight_limit(sch, rank); }
  std::vector<std::vector<OrderEntry>> worker_orders(const Schedule& sch) const override {
    const int S = sch.workers(), v = sch.chunks(), M = sch.options().microbatches;
    const int total = v * M;
    auto microbatch = [&](int k) { return (k / (S * v)) * S + k % S; };
    auto forward_chunk = [&](int k) { return (k / S) % v; };
    auto backward_chunk = [&](int k) { return v - 1 - (k / S) % v; };
    std::vector<std::vector<OrderEntry>> order(static_cast<size_t>(S));
    for (int w = 0; w < S; ++w) {
      auto& o = order[static_cast<size_t>(w)];
      const int warm = warmup(sch, w);
      for (int k = 0; k < warm; ++k) o.push_back({ActionKind::Forward, microbatch(k), forward_chunk(k)});
      for (int i = 0; i < total - warm; ++i) {
        o.push_back({ActionKind::Forward, microbatch(warm + i), forward_chunk(warm + i)});
        o.push_back({ActionKind::Backward, microbatch(i), backward_chunk(i)});
      }
      for (int i = std::max(0, total - warm); i < total; ++i)
        o.push_back({ActionKind::Backward, microbatch(i), backward_chunk(i)});
    }
    return order;
  }
};

// PipeDream-2BW (Narayanan et al. ICML 2021).
class TwoBW final : public ScheduleKind {
 public:
  const char* name() const override { return "2bw"; }
  const char* help() const override {
    return "PipeDream-2BW: 1F1B never drained, batch b on version b - 1 (train --gradient-delay 1)";
  }
  int weight_versions() const override { return 2; }
  int64_t batch_version(int64_t batch) const override { return two_bw_version(batch); }
  bool never_drains() const override { return true; }
  // The pipeline drains at a checkpoint and would restart the version delay.
  bool checkpoints() const override { return false; }
  void check(const Plan& plan, const ScheduleOptions& o) const override {
    const int stages = static_cast<int>(plan.stages.size());
    if (o.microbatches < stages)
      throw UserError(cat("2bw keeps two weight versions only with at least as many microbatches per batch as "
                          "stages: --microbatches ", o.microbatches, " < ", stages, " stages"));
    for (const PlanStage& st : plan.stages)
      if (st.replicas > o.microbatches)
        throw UserError(cat("2bw: stage ", st.index, " has ", st.replicas, " replicas but a batch only ",
                            o.microbatches, " microbatches (every replica needs one)"));
  }
};

}  // namespace

const ScheduleKind& one_f_one_b_rr_kind() { static const OneFOneBRoundRobin k; return k; }
const ScheduleKind& gpipe_kind() { static const GPipe k; return k; }
const ScheduleKind& one_f_one_b_flush_kind() { static const OneFOneBFlush k; return k; }
const ScheduleKind& zero_bubble_h1_kind() { static const ZeroBubbleH1 k; return k; }
const ScheduleKind& interleaved_kind() { static const Interleaved k; return k; }
const ScheduleKind& two_bw_kind() { static const TwoBW k; return k; }

}  // namespace pd
