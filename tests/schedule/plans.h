#pragma once
// Plans and profiles built in code for the schedule and simulator tests.
#include <numeric>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "profiler/profile.h"
#include "runtime/schedule/schedule.h"
#include "planner/topology.h"

namespace pd::testing {

// Stages with the given replica counts on consecutive ranks of a flat
// topology; every stage takes `forward_s` + `backward_s` per minibatch.
inline Plan make_plan(const std::vector<int>& replicas, double forward_s = 1.0, double backward_s = 2.0,
                      uint64_t output_bytes = 0, uint64_t parameter_bytes = 0, double bandwidth_GBps = 1.0) {
  Plan p;
  int workers = std::accumulate(replicas.begin(), replicas.end(), 0);
  p.topology = flat_topology(workers, bandwidth_GBps);
  p.profile.batch_size = 64;
  int rank = 0;
  for (size_t s = 0; s < replicas.size(); ++s) {
    PlanStage st;
    st.index = static_cast<int>(s);
    st.first_layer = st.last_layer = static_cast<int>(s);
    st.replicas = replicas[s];
    for (int k = 0; k < replicas[s]; ++k) st.ranks.push_back(rank++);
    st.forward_s = forward_s;
    st.backward_s = backward_s;
    st.compute_s = forward_s + backward_s;
    st.output_bytes = output_bytes;
    st.parameter_bytes = parameter_bytes;
    p.stages.push_back(st);
  }
  p.config = config_string(replicas);
  return p;
}

// A schedule's options in one call: kind, minibatches (flush schedules:
// batches), microbatches per batch, weight policy, virtual stages.
inline ScheduleOptions schedule_options(const ScheduleKind* kind, int64_t minibatches, int microbatches = 1,
                                        WeightPolicy policy = WeightPolicy::Stash, int virtual_stages = 1) {
  ScheduleOptions o;
  o.kind = kind;
  o.minibatches = minibatches;
  o.microbatches = microbatches;
  o.policy = policy;
  o.virtual_stages = virtual_stages;
  return o;
}

// A chain of `layers` equal "linear" layers (`layer`'s times and sizes;
// ids, names and the edges i -> i+1 are set here), profiled at `batch`.
inline Profile equal_chain_profile(int layers, int batch, ProfileNode layer) {
  Profile p;
  p.model = "chain";
  p.batch_size = batch;
  for (int i = 0; i < layers; ++i) {
    layer.id = i;
    layer.name = "layer" + std::to_string(i);
    layer.op = "linear";
    p.nodes.push_back(layer);
    if (i > 0) p.edges.push_back({i - 1, i});
  }
  return p;
}

}  // namespace pd::testing
