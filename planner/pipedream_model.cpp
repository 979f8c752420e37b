#include "planner/pipedream_model.h"

#include <cmath>
#include <functional>
#include <optional>
#include <limits>

#include "core/error.h"
#include "planner/antichain_dag.h"

namespace pd {
namespace {

constexpr double kUndefined = std::numeric_limits<double>::infinity();

struct Entry {
  double time = kUndefined;
  int split_state = -1, split_m = -1;  // previous part: A[i][split_state][split_m]
  int replicas = 0;
};

// Per-state sums over closures and the boundary, as PipeDream computes them.
struct StateSums {
  std::vector<double> compute, act, param, out;
};

StateSums state_sums(const PlanningGraph& g, const AntichainDag& dag) {
  StateSums s;
  for (size_t k = 0; k < dag.size(); ++k) {
    double c = 0, a = 0, p = 0, o = 0;
    dag.closure[k].for_each([&](size_t v) {
      c += (g.nodes[v].forward_s + g.nodes[v].backward_s);
      a += g.nodes[v].output_bytes;
      p += g.nodes[v].parameter_bytes;
    });
    dag.boundary[k].for_each([&](size_t v) { o += g.nodes[v].output_bytes; });
    s.compute.push_back(c), s.act.push_back(a), s.param.push_back(p), s.out.push_back(o);
  }
  return s;
}

class PipedreamSolver {
 public:
  PipedreamSolver(const AntichainDag& dag, const StateSums& sums, const PlannerOptions& options, double memory)
      : dag_(dag), sums_(sums), options_(options), memory_(memory), n_(int(dag.size())) {
    compute_.assign(size_t(n_ + 1) * n_, kUndefined);
    for (int i = 0; i <= n_; ++i)
      for (int j = 0; j < n_; ++j)
        if (i == 0) compute_[idx2(i, j)] = sums_.compute[j];
        else if (j > i - 1) compute_[idx2(i, j)] = sums_.compute[j] - sums_.compute[i - 1];
  }

  // Solves one level; afterwards compute_ holds this level's times.
  void solve_level(int workers, double bandwidth, int previous_workers, bool last_level) {
    m_ = workers;
    rows_ = last_level ? 1 : n_ + 1;
    table_.assign(size_t(rows_) * n_ * m_, Entry{});
    const double k_prev = previous_workers;
    for (int i = 0; i < rows_; ++i)
      for (int j = (i == 0 ? 0 : i); j < n_; ++j) {
        double compute = compute_[idx2(i, j)];
        if (compute == kUndefined) continue;
        double act = range(sums_.act, i, j), param = range(sums_.param, i, j);
        for (int m = 0; m < (options_.straight ? 1 : m_); ++m) {
          double stash = std::ceil(double(m_ - (m + 1)) / (m + 1)) * (act + param);
          if (memory_ > 0 && stash > memory_) continue;
          double sync = 4.0 * m * param / (bandwidth * (m + 1)) / k_prev;
          table_[idx3(i, j, m)] = {(compute + sync) / (m + 1), -1, -1, m + 1};
        }
      }
    for (int i = 0; i < rows_; ++i) recurse_row(i, bandwidth);
    if (!last_level)
      for (int i = 0; i <= n_; ++i)
        for (int j = 0; j < n_; ++j) compute_[idx2(i, j)] = table_[idx3(i, j, m_ - 1)].time;
    levels_.push_back(table_);
    level_workers_.push_back(m_);
    level_rows_.push_back(rows_);
  }

  double answer() const { return levels_.back()[idx3(0, n_ - 1, m_ - 1)].time; }

  // Stages of the optimum: (start row, end state, replicas per level-group).
  struct LevelStage {
    int row, end, replicas;
  };
  std::vector<LevelStage> stages_of(int level, int row, int end, int m) const {
    std::vector<LevelStage> out;
    const auto& t = levels_[level];
    int rows = level_rows_[level], workers = level_workers_[level];
    auto at = [&](int i, int j, int mm) { return t[(size_t(i < rows ? i : 0) * n_ + j) * workers + mm]; };
    Entry e = at(row, end, m);
    while (true) {
      if (e.split_state < 0) {
        out.push_back({row, end, e.replicas});
        break;
      }
      out.push_back({e.split_state + 1, end, e.replicas});
      end = e.split_state;
      e = at(row, end, e.split_m);
    }
    return {out.rbegin(), out.rend()};
  }
  int levels() const { return int(levels_.size()); }
  int workers_at(int level) const { return level_workers_[level]; }

 private:
  size_t idx2(int i, int j) const { return size_t(i) * n_ + j; }
  size_t idx3(int i, int j, int m) const { return (size_t(i) * n_ + j) * m_ + m; }
  double range(const std::vector<double>& v, int i, int j) const { return i == 0 ? v[j] : v[j] - v[i - 1]; }

  // The recursion for row i. Loops run j-outer, m-inner (PipeDream runs m
  // outer): an entry only reads entries of smaller j or smaller m, and for
  // one entry the candidates are tried in PipeDream's order (k, then m'),
  // so the result, ties included, is the same.
  void recurse_row(int i, double bandwidth) {
    sync_factor_.assign(m_ + 1, 0), inverse_.assign(m_ + 1, 0), transfer_factor_.assign(m_ + 1, 0);
    for (int mp = 1; mp <= m_; ++mp) {
      sync_factor_[mp] = 4.0 * (mp - 1) / (bandwidth * mp);
      inverse_[mp] = 1.0 / mp;
      if (options_.activation_compression_ratio)
        transfer_factor_[mp] = 2.0 / (bandwidth * mp) / *options_.activation_compression_ratio;
    }
    std::vector<int> candidates;
    std::vector<double> last, transfer;  // per candidate, per m'
    std::vector<double> stash_bytes;
    const std::optional<double>& ratio = options_.activation_compression_ratio;
    for (int j = i + 1; j < n_; ++j) {
      candidates.clear();
      dag_.ancestors[j].for_each([&](size_t k) {
        if (i > 0 && dag_.ancestors[i - 1].test(k)) return;
        if (i > 0 && int(k) < i) return;  // A[i][k] is undefined there
        if (compute_[idx2(int(k) + 1, j)] == kUndefined) return;
        candidates.push_back(int(k));
      });
      const size_t c = candidates.size();
      const int max_mp = options_.straight ? 1 : m_ - 1;
      last.resize(c * m_);
      if (ratio) transfer.resize(c * m_);
      stash_bytes.resize(c);
      // Per-m' factors, hoisted; the products differ from PipeDream's
      // expression order by at most an ulp.
      for (size_t t = 0; t < c; ++t) {
        int k = candidates[t];
        double last_compute = compute_[idx2(k + 1, j)];
        double param = range(sums_.param, k + 1, j);
        stash_bytes[t] = range(sums_.act, k + 1, j) + param;
        double* l = &last[t * m_];
        for (int mp = 1; mp <= max_mp; ++mp) l[mp] = (last_compute + param * sync_factor_[mp]) * inverse_[mp];
        if (ratio) {
          double* x = &transfer[t * m_];
          double out = sums_.out[k];
          if (j < n_ - 1) out = std::max(out, sums_.out[j]);
          for (int mp = 1; mp <= max_mp; ++mp) x[mp] = out * transfer_factor_[mp];
        }
      }
      for (int m = 1; m < m_; ++m) {
        Entry best = table_[idx3(i, j, m)];
        if (options_.fewer_workers) {
          const Entry& fewer = table_[idx3(i, j, m - 1)];
          if (fewer.time < best.time) best = fewer;
        }
        const int max_mp = options_.straight ? 1 : m;
        for (size_t t = 0; t < c; ++t) {
          const int k = candidates[t];
          const Entry* prev_row = &table_[idx3(i, k, 0)];
          for (int mp = 1; mp <= max_mp; ++mp) {
            if (memory_ > 0 && stash_bytes[t] * std::ceil(double(m_ - (m + 1)) / mp) > memory_) continue;
            double prev = prev_row[m - mp].time;
            if (prev == kUndefined) continue;
            double time = std::max(prev, last[t * m_ + mp]);
            if (ratio) time = std::max(time, transfer[t * m_ + mp]);
            if (time < best.time) best = {time, k, m - mp, mp};
          }
        }
        table_[idx3(i, j, m)] = best;
      }
    }
  }

  const AntichainDag& dag_;
  const StateSums& sums_;
  const PlannerOptions& options_;
  double memory_;
  int n_, m_ = 1, rows_ = 1;
  std::vector<double> compute_;
  std::vector<double> sync_factor_, inverse_, transfer_factor_;
  std::vector<Entry> table_;
  std::vector<std::vector<Entry>> levels_;
  std::vector<int> level_workers_, level_rows_;
};

}  // namespace

double evaluate_pipedream_layout(const PlanningGraph& g, const Topology& topology, const PlannerOptions& options,
                                 std::vector<PipedreamLayoutStage>& layout) {
  PD_CHECK(topology.levels.size() == 1, "one level only");
  AntichainDag dag;
  PD_CHECK(build_antichain_dag(g, size_t(options.max_antichain_states), dag));
  StateSums s = state_sums(g, dag);
  const double b = topology.levels[0].bandwidth_GBps * 1e9;
  const int n = int(dag.size());
  double time = 0;
  auto range = [](const std::vector<double>& v, int i, int j) { return i == 0 ? v[j] : v[j] - v[i - 1]; };
  for (size_t t = 0; t < layout.size(); ++t) {
    auto& st = layout[t];
    // PipeDream prints half-open state ranges [start, end).
    int row = st.start, last = st.end - 1, m = st.replicas;
    st.compute_s = range(s.compute, row, last);
    double param = range(s.param, row, last);
    double stage = (st.compute_s + 4.0 * (m - 1) * param / (b * m)) / m;
    if (t > 0 && options.activation_compression_ratio) {
      double r = *options.activation_compression_ratio;
      stage = std::max(stage, 2.0 * s.out[st.start - 1] / (b * m) / r);
      if (last < n - 1) stage = std::max(stage, 2.0 * s.out[last] / (b * m) / r);
    }
    time = std::max(time, stage);
  }
  return time;
}

PlannedPipeline plan_pipedream(const PlanningGraph& g, const Topology& topology, const PlannerOptions& options) {
  AntichainDag dag;
  if (!build_antichain_dag(g, size_t(options.max_antichain_states), dag))
    throw UserError(cat("the pipedream cost model needs PipeDream's antichain states, and this profile has more than ",
                        options.max_antichain_states,
                        " of them; use the default cost model (it falls back to topological prefixes)"));
  StateSums sums = state_sums(g, dag);
  const int n = int(dag.size());
  double memory = double(options.memory_bytes ? options.memory_bytes : topology.worker_memory_bytes);
  PipedreamSolver solver(dag, sums, options, memory);
  const int levels = int(topology.levels.size());
  int previous = 1;
  for (int l = 0; l < levels; ++l) {
    solver.solve_level(topology.levels[l].count, topology.levels[l].bandwidth_GBps * 1e9, previous, l == levels - 1);
    previous = topology.levels[l].count;
  }
  PlannedPipeline result;
  result.state_space = g.is_chain() ? StateSpaceKind::chain : StateSpaceKind::antichain;
  result.time_per_minibatch_s = solver.answer();
  if (result.time_per_minibatch_s == kUndefined)
    throw NoFeasiblePlan("no allocation fits the memory limit (pipedream cost model)");
  result.single_worker_s = sums.compute[n - 1];
  double dp = result.single_worker_s;
  previous = 1;
  for (const auto& level : topology.levels) {
    dp = (dp + 4.0 * (level.count - 1) * sums.param[n - 1] / (level.bandwidth_GBps * 1e9 * level.count) / previous) /
         level.count;
    previous = level.count;
  }
  result.data_parallel_s = dp;

  // Expand the outermost stages level by level; units at level l hold
  // Π_{l'<l} count workers, laid out consecutively.
  struct Pending {
    int level, row, end;
    std::vector<int> unit_starts;  // first worker of each unit running this range
    double time;
  };
  std::vector<int> unit_size(levels, 1);
  for (int l = 1; l < levels; ++l) unit_size[l] = unit_size[l - 1] * topology.levels[l - 1].count;
  std::vector<Pending> todo = {{levels - 1, 0, n - 1, {0}, result.time_per_minibatch_s}};
  std::vector<PlannedStage> stages;
  std::function<void(const Pending&)> expand = [&](const Pending& p) {
    auto parts = solver.stages_of(p.level, p.row, p.end, solver.workers_at(p.level) - 1);
    int offset = 0;
    for (const auto& part : parts) {
      std::vector<int> starts;
      for (int base : p.unit_starts)
        for (int r = 0; r < part.replicas; ++r) starts.push_back(base + (offset + r) * unit_size[p.level]);
      offset += part.replicas;
      if (p.level == 0) {
        PlannedStage s;
        s.ranks = starts;
        DynamicBitset nodes = dag.closure[part.end];
        DynamicBitset before(g.nodes.size());
        if (part.row > 0) before = dag.closure[part.row - 1];
        nodes.for_each([&](size_t v) {
          if (!before.test(v)) s.nodes.push_back(int(v));
        });
        double param = part.row == 0 ? sums.param[part.end] : sums.param[part.end] - sums.param[part.row - 1];
        int m = part.replicas;
        s.sync_s = 4.0 * (m - 1) * param / (topology.levels[0].bandwidth_GBps * 1e9 * m);
        stages.push_back(std::move(s));
      } else {
        expand({p.level - 1, part.row, part.end, starts, 0});
      }
    }
  };
  expand(todo.front());
  result.stages = std::move(stages);
  return result;
}

}  // namespace pd
