#pragma once
// Cluster topology: levels from the innermost out (docs/design.md §5).
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace pd {

struct TopologyLevel {
  int count = 1;                 // workers (or groups) per group at this level
  double bandwidth_GBps = 1.0;   // 10^9 bytes/s
  // Fixed cost of one message at this level, whatever its size (measured by
  // bench-comm; 0 when not given): the simulator adds it to every transfer.
  double latency_us = 0;
  // Bus bandwidth of an all-reduce over a group spanning this level, as
  // bench-comm measures it (NCCL's convention: the time is 2(r-1)/r x bytes
  // / allreduce_GBps for r members); 0 when not measured. It carries what
  // the link's bandwidth alone does not: the runtime's algorithm and
  // whether both directions of a link run at once. The simulator uses it
  // when given (runtime/simulator/README.md, "Cost model").
  double allreduce_GBps = 0;
  // CPU a rank's communication threads spend on a message at this level, at
  // each end (sender and receiver alike), as bench-comm measures it: bytes
  // moved per CPU second (10^9 bytes/s) and a fixed cost per message. 0:
  // not measured. With shared cores the simulator charges it to the cores
  // (runtime/simulator/README.md, "Shared cores").
  double comm_cpu_GBps = 0;
  double comm_cpu_us_per_message = 0;
  // The all-reduce bus bandwidth again, measured while every core is kept
  // busy (bench-comm beside one spinning process per rank, as
  // bench/host_measures.sh runs it): what a run's all-reduce gets when its
  // ranks' compute shares the cores with it, its communication threads and
  // the network stack waiting for time slices. 0: not measured. A replay
  // whose workers share the cores (simulate --cores) prices all-reduces
  // with it; otherwise allreduce_GBps. Given only with allreduce_GBps.
  double allreduce_busy_GBps = 0;
  // The per-message latency again, measured while every core is kept busy
  // (half a round trip of bench-comm's latency loop beside one spinning
  // process per rank): a message waits for its receiver's communication
  // thread to get a time slice. 0: not measured. A replay whose workers
  // share the cores and whose messages arrive with their last byte
  // (simulate --cores --realistic-latency) delivers each message that much
  // later than its link frees while the cores are all taken by computations
  // (with a core free the receiver wakes at once); the link is busy for
  // latency_us as before.
  double latency_busy_us = 0;
};

// CPU seconds one end of a message spends: per_message_s + bytes x per_byte_s.
struct CommCpuCost {
  double per_message_s = 0, per_byte_s = 0;
  bool any() const { return per_message_s > 0 || per_byte_s > 0; }
  double seconds(double bytes, double messages = 1) const { return messages * per_message_s + bytes * per_byte_s; }
};

struct Topology {
  std::vector<TopologyLevel> levels;
  uint64_t worker_memory_bytes = 0;  // 0: unlimited
  int total_workers() const;
  // Bandwidth between two ranks: the level of their lowest common group.
  double bandwidth_between(int rank_a, int rank_b) const;  // GB/s
  // Per-message latency between two ranks, in seconds (0 for a rank and
  // itself); with `cores_busy`, the one measured with the cores busy
  // (latency_busy_us) where their lowest common level has it.
  double latency_between(int rank_a, int rank_b, bool cores_busy = false) const;
  // The largest per-message latency between the first rank and the others.
  double group_latency(const std::vector<int>& ranks) const;
  // Bandwidth used by a group of ranks for all-reduce (its slowest link).
  double group_bandwidth(const std::vector<int>& ranks) const;
  // The measured all-reduce bus bandwidth of the widest level the group
  // spans (GB/s; 0 when that level has none); with `cores_busy`, the one
  // measured with the cores kept busy where the level has it.
  double group_allreduce_GBps(const std::vector<int>& ranks, bool cores_busy = false) const;
  // The communication threads' CPU per message between two ranks (their
  // lowest common level's), and for a group's all-reduce (its widest
  // level's). Zero when the level has no such measurement.
  CommCpuCost comm_cpu_between(int rank_a, int rank_b) const;
  CommCpuCost group_comm_cpu(const std::vector<int>& ranks) const;
};

Topology read_topology(const std::string& path);  // throws UserError
// The same from parsed JSON (a plan's "topology"); `where` names the source.
Topology topology_from_json(const nlohmann::json& j, const std::string& where);
Topology flat_topology(int workers, double bandwidth_GBps);
// "4000000000", "4GB", "16GiB", "512MB" -> bytes; throws UserError.
uint64_t parse_size(const std::string& s);

}  // namespace pd
