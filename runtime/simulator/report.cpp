// Simulator outputs: JSON report, text summary, Chrome trace, and the
// per-stage stash sizes taken from a profile.
#include <algorithm>
#include <iomanip>
#include <map>
#include <ostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/text.h"
#include "profiler/profile.h"
#include "runtime/simulator/simulator.h"
#include "runtime/simulator/worker_memory.h"

namespace pd {

// The profile nodes of each plan stage: its node ids (DAG plans) or its layer range.
std::vector<std::vector<const ProfileNode*>> stage_nodes(const Plan& plan, const Profile& profile) {
  std::map<int, const ProfileNode*> by_id;
  for (const auto& n : profile.nodes) by_id[n.id] = &n;
  std::vector<std::vector<const ProfileNode*>> out;
  for (const PlanStage& st : plan.stages) {
    std::vector<const ProfileNode*> nodes;
    if (!st.nodes.empty()) {
      for (int id : st.nodes) {
        auto it = by_id.find(id);
        if (it == by_id.end())
          throw UserError(cat("plan stage ", st.index, " names profile node ", id, ", which ",
                              profile.source_path, " does not have: pass the profile the plan was made from"));
        nodes.push_back(it->second);
      }
    } else {
      if (st.last_layer >= static_cast<int>(profile.nodes.size()) || st.first_layer < 0)
        throw UserError(cat("plan stage ", st.index, " covers layers ", st.first_layer, "..", st.last_layer,
                            " but ", profile.source_path, " has ", profile.nodes.size(),
                            ": pass the profile the plan was made from"));
      for (int l = st.first_layer; l <= st.last_layer; ++l) nodes.push_back(&profile.nodes[static_cast<size_t>(l)]);
    }
    out.push_back(std::move(nodes));
  }
  return out;
}

std::vector<uint64_t> stashed_bytes_from_profile(const Plan& plan, const Profile& profile) {
  std::vector<uint64_t> out;
  for (const StageFootprint& f : stage_footprints(plan, profile))
    out.push_back(uint64_t(std::max(0.0, f.activation_bytes)));
  return out;
}

void set_memory_from_profile(SimulationOptions& o, const Plan& plan, const Profile& profile) {
  o.stashed_bytes.clear(), o.working_bytes.clear(), o.recompute_bytes.clear();
  o.forward_working_bytes.clear(), o.backward_working_bytes.clear(), o.input_backward_working_bytes.clear();
  const bool splits = records_weight_passes(profile);
  for (const StageFootprint& f : stage_footprints(plan, profile)) {
    o.stashed_bytes.push_back(uint64_t(std::max(0.0, f.activation_bytes)));
    o.working_bytes.push_back(uint64_t(std::max(0.0, f.workspace_bytes)));
    o.recompute_bytes.push_back(uint64_t(std::max(0.0, f.recompute_bytes)));
    o.forward_working_bytes.push_back(uint64_t(std::max(0.0, f.forward_working_bytes)));
    o.backward_working_bytes.push_back(uint64_t(std::max(0.0, f.backward_working_bytes)));
    if (splits)
      o.input_backward_working_bytes.push_back(uint64_t(std::max(0.0, f.input_backward_working_bytes)));
  }
  o.weight_pass_bytes = weight_pass_bytes_from_profile(plan, profile);
  o.weight_working_bytes = weight_working_bytes_from_profile(plan, profile);
}

namespace {
// A minibatch of the plan's batch against the profile's, as
// stashed_bytes_from_profile's figures are.
double plan_batch_share(const Plan& plan, const Profile& profile) {
  return plan.batch > 0 && profile.batch_size > 0 ? double(plan.batch) / double(profile.batch_size) : 1.0;
}
}  // namespace

std::vector<uint64_t> weight_working_bytes_from_profile(const Plan& plan, const Profile& profile) {
  const bool measured = std::any_of(profile.nodes.begin(), profile.nodes.end(),
                                    [](const ProfileNode& n) { return n.weight_workspace_bytes.has_value(); });
  if (!measured || !records_weight_passes(profile)) return {};
  const double share = plan_batch_share(plan, profile);
  std::vector<uint64_t> out;
  for (const auto& nodes : stage_nodes(plan, profile)) {
    uint64_t most = 0;
    for (const ProfileNode* n : nodes) most = std::max(most, n->weight_workspace_bytes.value_or(0));
    out.push_back(uint64_t(double(most) * share));
  }
  return out;
}

std::vector<uint64_t> weight_pass_bytes_from_profile(const Plan& plan, const Profile& profile) {
  if (!records_weight_passes(profile)) return {};
  const double share = plan_batch_share(plan, profile);
  std::vector<uint64_t> out;
  for (const auto& nodes : stage_nodes(plan, profile)) {
    double bytes = 0;
    for (const ProfileNode* n : nodes) bytes += double(n->weight_pass_bytes);
    out.push_back(uint64_t(bytes * share));
  }
  return out;
}

std::vector<StageMicrobatchTimes> microbatch_times_from_profile(const Plan& plan, const Profile& profile,
                                                               int microbatch) {
  std::vector<StageMicrobatchTimes> out;
  for (const auto& nodes : stage_nodes(plan, profile)) {
    StageMicrobatchTimes t;
    for (const ProfileNode* n : nodes) {
      const BatchTimes* b = n->times_at(microbatch);
      if (!b) return {};  // the profile did not measure that batch (on every node)
      t.forward_s += b->forward_ms / 1e3, t.backward_s += b->backward_ms / 1e3;
    }
    out.push_back(t);
  }
  return out;
}

std::vector<std::vector<GradientBucketTiming>> gradient_buckets_from_profile(const Plan& plan, const Profile& profile,
                                                                            size_t bucket_bytes) {
  std::vector<std::vector<GradientBucketTiming>> out;
  const auto all_nodes = stage_nodes(plan, profile);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    std::vector<GradientBucketTiming> timings;
    const std::vector<const ProfileNode*>& nodes = all_nodes[s];
    if (plan.stages[s].replicas > 1) {
      // Backward order: the stage's last layer first.
      std::vector<std::vector<size_t>> bytes;
      std::vector<double> done_ms;  // backward time once this layer is done
      double total_ms = 0, total_bytes = 0;
      for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
        total_ms += (*it)->backward_ms;
        done_ms.push_back(total_ms);
        bytes.push_back((*it)->parameter_bytes ? std::vector<size_t>{size_t((*it)->parameter_bytes)}
                                               : std::vector<size_t>{});
        total_bytes += double((*it)->parameter_bytes);
      }
      const double scale = total_bytes > 0 ? double(plan.stages[s].parameter_bytes) / total_bytes : 0;
      for (const GradientBucket& b : plan_gradient_buckets(bytes, bucket_bytes)) {
        const double fraction = total_ms > 0 ? done_ms[b.layers.back()] / total_ms : 1.0;
        timings.push_back({std::clamp(fraction, 1e-9, 1.0), double(b.bytes) * scale});
      }
    }
    out.push_back(std::move(timings));
  }
  return out;
}

namespace {
void drop_predictions(Plan& plan) {
  plan.time_per_minibatch_s = plan.throughput_samples_per_s = 0;
  plan.speedup_vs_single = plan.speedup_vs_data_parallel = 0;
  plan.closed_form_s = plan.closed_form_bound_s = plan.shared_cores_bound_s = 0;
  plan.single_worker_s = plan.data_parallel_s = 0;
  for (PlanStage& st : plan.stages) st.memory_bytes = 0, st.sync_s = st.transfer_s = st.time_s = 0;
}
}  // namespace

void recost_plan(Plan& plan, const Profile& profile) {
  drop_predictions(plan);
  const auto nodes = stage_nodes(plan, profile);
  for (size_t s = 0; s < plan.stages.size(); ++s) {
    PlanStage& st = plan.stages[s];
    st.forward_s = st.backward_s = st.optimizer_s = 0;
    st.parameter_bytes = 0;
    st.layer_names.clear();
    for (const ProfileNode* n : nodes[s]) {
      st.forward_s += n->forward_ms / 1e3, st.backward_s += n->backward_ms / 1e3, st.optimizer_s += n->optimizer_ms / 1e3;
      st.parameter_bytes += n->parameter_bytes;
      if (st.nodes.empty()) st.layer_names.push_back(n->name);
    }
    st.compute_s = st.time_s = st.forward_s + st.backward_s;
    // Recomputed layers (chain plans: the stage's nodes are its layers in order): their forward again.
    st.recompute_s = 0;
    for (int l : st.recompute_layers)
      if (size_t(l - st.first_layer) < nodes[s].size()) st.recompute_s += nodes[s][size_t(l - st.first_layer)]->forward_ms / 1e3;
    st.time_s += st.recompute_s;
    if (!nodes[s].empty()) st.output_bytes = nodes[s].back()->output_bytes;
  }
  plan.predictions_for = stage_fingerprint(plan);
}

std::string refresh_stale_plan(Plan& plan, const Profile* profile) {
  if (!plan.predictions_stale()) return "";
  const std::string edited = "its stages were edited after it was planned: its stored predictions (time per "
                             "minibatch, speed-ups, per-stage memory) describe another plan and are dropped";
  if (!profile) {
    drop_predictions(plan);
    plan.predictions_for = stage_fingerprint(plan);
    return edited;
  }
  recost_plan(plan, *profile);
  return cat(edited, "; every stage's compute times and sizes are recomputed from ", profile->source_path);
}

nlohmann::json report_to_json(const SimulationReport& rep) {
  nlohmann::json workers = nlohmann::json::array();
  for (const auto& w : rep.workers) {
    workers.push_back({{"rank", w.rank},
                       {"stage", w.stage},
                       {"busy_fraction", w.busy_fraction},
                       {"bubble_fraction", w.bubble_fraction},
                       {"peak_in_flight", w.peak_in_flight},
                       {"peak_held", w.peak_held},
                       {"peak_activation_bytes", w.peak_activation_bytes},
                       {"peak_weight_versions", w.peak_weight_versions}});
    if (w.peak_working_bytes > 0) workers.back()["peak_working_bytes"] = w.peak_working_bytes;
    if (w.predicted_memory_bytes > 0) workers.back()["predicted_memory_bytes"] = w.predicted_memory_bytes;
  }
  nlohmann::json j = {{"schedule", to_string(rep.schedule.kind)},
                      {"minibatches", rep.minibatches},
                      {"makespan_s", rep.makespan_s},
                      {"time_per_minibatch_s", rep.time_per_minibatch_s},
                      {"throughput_samples_per_s", rep.throughput_samples_per_s},
                      {"workers", workers}};
  if (rep.comm_cpu_per_minibatch_s > 0) j["comm_cpu_per_minibatch_s"] = rep.comm_cpu_per_minibatch_s;
  return j;
}

namespace {

std::string percent(double fraction) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(1) << 100.0 * fraction << "%";
  return os.str();
}

}  // namespace

std::string format_report(const SimulationReport& rep) {
  std::ostringstream os;
  os << std::setprecision(4);
  const std::string step = step_noun(rep.schedule);
  os << "schedule " << to_string(rep.schedule.kind) << ", " << rep.minibatches << " " << step << (step == "batch" ? "es" : "s")
     << ", makespan " << rep.makespan_s << " s\n"
     << "time per " << step
     << " (steady state): " << rep.time_per_minibatch_s << " s, throughput ";
  if (rep.throughput_samples_per_s > 0) os << rep.throughput_samples_per_s << " samples/s\n";
  else os << "unknown\n";
  if (rep.comm_cpu_per_minibatch_s > 0)
    os << "communication threads' CPU: " << rep.comm_cpu_per_minibatch_s * 1e3 << " ms per "
       << step << ", all ranks\n";
  // zb-h1 holds a microbatch's tensors from F to W, past its B: a column
  // for that peak when it differs from the F-to-B one.
  bool held = false;
  bool memory = false;
  for (const auto& w : rep.workers) held = held || w.peak_held != w.peak_in_flight;
  for (const auto& w : rep.workers) memory = memory || w.predicted_memory_bytes > 0;
  os << std::right << std::setw(6) << "rank" << std::setw(7) << "stage" << std::setw(8) << "busy" << std::setw(8)
     << "bubble" << std::setw(11) << "in-flight";
  if (held) os << std::setw(11) << "F-to-W";
  os << std::setw(13) << "stashed" << std::setw(10) << "versions";
  if (memory) os << std::setw(12) << "memory";
  os << "\n";
  for (const auto& w : rep.workers) {
    os << std::setw(6) << w.rank << std::setw(7) << w.stage << std::setw(8) << percent(w.busy_fraction)
       << std::setw(8) << percent(w.bubble_fraction) << std::setw(11) << w.peak_in_flight;
    if (held) os << std::setw(11) << w.peak_held;
    os << std::setw(13) << bytes_text(static_cast<double>(w.peak_activation_bytes)) << std::setw(10)
       << w.peak_weight_versions;
    if (memory) os << std::setw(12) << bytes_text(w.predicted_memory_bytes);
    os << "\n";
  }
  return os.str();
}

void write_chrome_trace(std::ostream& os, const Plan& plan, const std::vector<TraceEvent>& events,
                        const ScheduleOptions& schedule) {
  const bool flush = schedule.microbatches > 1;  // name items batch.microbatch
  const Schedule placed(plan, schedule);  // where stages run
  const int chunks = placed.chunks();
  // Microseconds, as the trace-event format expects. One process; a thread
  // per rank (tid = rank) and one per stage for all-reduces (tid = R + s).
  int R = 0;
  for (const auto& s : plan.stages) R += s.replicas;
  nlohmann::json out = nlohmann::json::array();
  if (chunks > 1) {
    // Several unreplicated stages per worker, where the kind places them.
    R /= chunks;
    for (int r = 0; r < R; ++r) {
      std::string stages;
      for (int c = 0; c < chunks; ++c) stages += cat(c ? "," : "", placed.stage_of(r, c));
      out.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", r},
                     {"args", {{"name", cat("rank ", r, " (stages ", stages, ")")}}}});
    }
  }
  for (const auto& s : plan.stages) {
    if (chunks > 1) break;
    for (int r : s.ranks)
      out.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", r},
                     {"args", {{"name", cat("rank ", r, " (stage ", s.index, ")")}}}});
    if (s.replicas > 1)
      out.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", 0}, {"tid", R + s.index},
                     {"args", {{"name", cat("stage ", s.index, " all-reduce")}}}});
  }
  std::vector<int> stage_of(R, 0);
  for (const auto& s : plan.stages)
    for (int r : s.ranks)
      if (r < R) stage_of[r] = s.index;
  for (const auto& e : events) {
    std::string name, colour;
    int tid = e.rank;
    std::string item = (flush ? cat(e.minibatch, ".", e.microbatch) : cat(e.minibatch)) +
                       (chunks > 1 ? cat(" c", e.chunk) : std::string());
    switch (e.kind) {
      case ActionKind::Forward: name = "F" + item; colour = "thread_state_running"; break;   // green
      case ActionKind::Backward: name = "B" + item; colour = "thread_state_iowait"; break;   // orange
      case ActionKind::BackwardWeight: name = "W" + item; colour = "rail_animation"; break;   // purple
      case ActionKind::OptimizerStep: name = "step " + item; colour = "yellow"; break;
      case ActionKind::AllReduce:
        name = cat("allreduce ", e.minibatch);
        colour = "grey";
        tid = R + stage_of[e.rank];
        break;
      default: continue;
    }
    out.push_back({{"ph", "X"}, {"name", name}, {"cat", to_string(e.kind)}, {"pid", 0}, {"tid", tid},
                   {"ts", e.start_s * 1e6}, {"dur", (e.end_s - e.start_s) * 1e6}, {"cname", colour},
                   {"args", {{"minibatch", e.minibatch}, {"microbatch", e.microbatch}, {"chunk", e.chunk}}}});
  }
  os << nlohmann::json{{"traceEvents", out}, {"displayTimeUnit", "ms"}}.dump() << "\n";
}

}  // namespace pd
