#pragma once
// Test helper: every level-aligned plan of a small chain on a small
// topology (planner/README.md), and the closed form of each, written out
// independently of the planner. A stage's workers are a block of
// consecutive ranks that lies inside one group of some level and is made
// of whole units of the level below (at level 0: any workers of one group).
#include <algorithm>
#include <cmath>
#include <array>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "planner/topology.h"
#include "profiler/profile.h"

namespace pd::testing_aligned {

// A random chain: compute-, sync- or transfer-bound by the draw
// (param_scale 0, 3 MB or 60 MB per unit of parameters).
inline Profile random_chain(std::mt19937& rng, int n, double param_scale) {
  std::uniform_real_distribution<double> ms(0.05, 10.0);
  std::uniform_int_distribution<int> mb(0, 4);
  Profile p;
  p.source_kind = ProfileSource::json;
  p.model = "chain";
  p.batch_size = 32;
  for (int i = 0; i < n; ++i) {
    ProfileNode node;
    node.id = i;
    node.name = "layer" + std::to_string(i);
    node.forward_ms = ms(rng), node.backward_ms = ms(rng);
    node.output_bytes = uint64_t(mb(rng)) * 2'000'000;
    node.parameter_bytes = uint64_t(mb(rng) * param_scale);
    node.activation_bytes = uint64_t(mb(rng)) * 5'000'000;
    node.optimizer_state_bytes = node.parameter_bytes;
    p.nodes.push_back(node);
    if (i) p.edges.push_back({i - 1, i});
  }
  return p;
}

struct Block {
  int first = 0, end = 0;  // ranks [first, end)
};

struct AlignedPlan {
  std::vector<Block> blocks;
  std::vector<int> cuts;  // stage s holds layers [cuts[s], cuts[s + 1])
};

inline std::vector<long long> group_sizes(const Topology& t) {
  std::vector<long long> g;
  long long size = 1;
  for (const auto& l : t.levels) g.push_back(size *= l.count);
  return g;
}

// Lowest level whose groups hold both ranks.
inline int common_level(const Topology& t, int a, int b) {
  auto g = group_sizes(t);
  for (size_t l = 0; l < g.size(); ++l)
    if (a / g[l] == b / g[l]) return int(l);
  return int(g.size()) - 1;
}

inline bool aligned(const Topology& t, int first, int end) {
  auto g = group_sizes(t);
  for (size_t l = 0; l < g.size(); ++l) {
    long long unit = l == 0 ? 1 : g[l - 1];
    if (first % unit == 0 && end % unit == 0 && first / g[l] == (end - 1) / g[l]) return true;
  }
  return false;
}

// Every tiling of ranks [0, workers) into aligned blocks.
inline std::vector<std::vector<Block>> aligned_tilings(const Topology& t, int workers) {
  std::vector<std::vector<Block>> out;
  std::vector<Block> cur;
  std::function<void(int)> go = [&](int at) {
    if (at == workers) {
      out.push_back(cur);
      return;
    }
    for (int end = at + 1; end <= workers; ++end)
      if (aligned(t, at, end)) {
        cur.push_back({at, end});
        go(end);
        cur.pop_back();
      }
  };
  go(0);
  return out;
}

// Every aligned plan using the first `workers` ranks (stages <= layers).
inline std::vector<AlignedPlan> aligned_plans(const Topology& t, int workers, int layers) {
  std::vector<AlignedPlan> out;
  for (const auto& blocks : aligned_tilings(t, workers)) {
    const int stages = int(blocks.size());
    if (stages > layers) continue;
    std::vector<int> cuts(stages + 1, 0);
    cuts[stages] = layers;
    std::function<void(int, int)> go = [&](int s, int from) {
      if (s == stages - 1) {
        out.push_back({blocks, cuts});
        return;
      }
      for (int next = from + 1; next <= layers - (stages - 1 - s); ++next) {
        cuts[s + 1] = next;
        go(s + 1, next);
      }
    };
    go(0, 0);
  }
  return out;
}

// The closed form (planner/README.md) of an aligned plan of a chain
// profile: the slowest of every stage's max(compute, ring all-reduce)/r and
// every boundary's 2·bytes/(bandwidth·r) into the next stage; kInf when a
// stage does not fit `memory` bytes (0: no limit). In-flight counts use
// `total_workers` (the topology's).
inline double closed_form(const AlignedPlan& p, const Profile& prof, const Topology& t, double memory,
                          int total_workers) {
  double worst = 0;
  for (size_t s = 0; s < p.blocks.size(); ++s) {
    const Block& b = p.blocks[s];
    const int r = b.end - b.first;
    double c = 0, params = 0, act = 0, opt = 0;
    for (int l = p.cuts[s]; l < p.cuts[s + 1]; ++l) {
      const auto& n = prof.nodes[l];
      c += (n.forward_ms + n.backward_ms) / 1e3, params += n.parameter_bytes, act += n.activation_bytes;
      opt += n.optimizer_state_bytes;
    }
    const int in_flight = (total_workers - 1 - b.first) / r + 1;
    // Weight versions + gradient, optimizer state, per in-flight minibatch its
    // stash, and with replicas the all-reduce's copy of the gradients.
    const double need = params * (in_flight + 1) + opt + act * in_flight + (r > 1 ? params : 0.0);
    if (memory > 0 && need > memory) return INFINITY;
    double sync = 0;
    if (r > 1) sync = 4.0 * (r - 1) * params / (r * t.levels[common_level(t, b.first, b.end - 1)].bandwidth_GBps * 1e9);
    worst = std::max(worst, std::max(c, sync) / r);
    if (s > 0) {
      double bytes = double(prof.nodes[p.cuts[s] - 1].output_bytes);
      double bw = t.levels[common_level(t, b.first - 1, b.first)].bandwidth_GBps * 1e9;
      worst = std::max(worst, 2.0 * bytes / (bw * r));
    }
  }
  return worst;
}

}  // namespace pd::testing_aligned
