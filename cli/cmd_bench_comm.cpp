// `pipedream bench-comm`: measures the transport the runtime will use
// (point-to-point latency/bandwidth between every pair of ranks, all-reduce
// time per size and group size) and writes a topology file for the planner
// (docs/design.md §4/§5). Runs under mpirun; rank 0 reports.
//
// --transport picks what is measured: mpi (host tensors, the CPU runtime's
// transport), staged (GPU tensors through host memory, what `run --device
// cuda` uses by default) or nccl (GPU tensors device to device, `run
// --transport nccl`). The GPU transports put every buffer on the rank's GPU
// (local rank modulo the visible GPUs) and need one GPU per rank for nccl.
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <numeric>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/atomic_file.h"
#include "core/error.h"
#include "core/cuda_plugin.h"
#include "planner/topology.h"  // parse_size: sizes as the planner spells them
#include "runtime/comm/mpi_transport.h"
#include "runtime/comm/nccl_transport.h"
#include "runtime/comm/staged_transport.h"

namespace pd::cli {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

// What --transport measures: host tensors over MPI (the CPU runtime's), or
// GPU tensors staged through host memory or sent by NCCL (run's
// DeviceTransport, which has no host-only member).
enum class CommTransport { mpi, staged, nccl };

const char* to_string(CommTransport t) {
  switch (t) {
    case CommTransport::mpi: return "mpi";
    case CommTransport::staged: return "staged";
    case CommTransport::nccl: return "nccl";
  }
  return "?";  // (unreachable: the switch covers every transport)
}

struct BenchCommOptions {
  std::vector<std::string> p2p_sizes = {"64KB", "1MB", "4MB", "16MB"};
  std::vector<std::string> allreduce_sizes = {"4KB", "256KB", "4MB", "32MB"};
  int latency_iters = 200;
  std::string topology_path;
  std::string jsonl_path;
  std::string worker_memory;
  double timeout_s = 60;
  std::string transport_flag = "mpi";  // --transport, parsed into transport
  CommTransport transport = CommTransport::mpi;
  std::string same_host = "shm";  // --same-host: shm (our segment) | mpi (to compare); checked by CLI11
};

// Which path carried traffic among `ranks`: NCCL, this host's shared-memory
// segment (every rank on one host and the path on), or MPI.
std::string path_among(const Transport& tr, const MpiTransport& mpi, CommTransport transport,
                       const std::vector<int>& ranks) {
  if (transport == CommTransport::nccl) return "nccl";
  for (int r : ranks)
    if (tr.host_of(r) != tr.host_of(ranks[0])) return "mpi";
  return mpi.shared_memory_on() ? "shm" : "mpi";
}

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

struct PairResult {
  int a = 0, b = 0;
  bool same_host = true;
  double latency_us = 0;
  std::vector<std::pair<size_t, double>> bandwidth;  // (bytes, GB/s)
  // The communication threads' CPU at one end (mean of a's and b's):
  // microseconds per message of the latency loop, and per size the bytes
  // streamed per CPU second (GB/s).
  double cpu_us_per_message = 0;
  std::vector<double> cpu_GBps;
  double large_message_cpu_GBps() const {
    size_t largest = 0;
    for (size_t k = 0; k < bandwidth.size(); ++k)
      if (bandwidth[k].first >= bandwidth[largest].first) largest = k;
    return largest < cpu_GBps.size() ? cpu_GBps[largest] : 0.0;
  }
  // The topology records the rate of the largest messages measured: the
  // planner uses it for activations and weights, which are large; small
  // messages fit in caches and would flatter the link.
  double large_message_GBps() const {
    std::pair<size_t, double> largest{0, 0};
    for (auto& p : bandwidth) largest = std::max(largest, p);
    return largest.second;
  }
};

struct AllReduceResult {
  int group_size = 0;
  size_t bytes = 0;
  double time_s = 0;
  double algbw_GBps() const { return bytes / time_s / 1e9; }
  // The per-link rate a ring would need for this time: 2(g-1)/g of the data.
  double busbw_GBps() const { return algbw_GBps() * 2.0 * (group_size - 1) / group_size; }
};

// Half a round trip of a one-float tensor (header + payload messages, as
// every runtime transfer). `cpu_s`: this rank's communication threads' CPU
// over the timed round trips (each rank sends and receives `iters` tensors).
double measure_latency_us(Transport& tr, Device dev, int a, int b, int iters, double& cpu_s) {
  Tensor x = Tensor::zeros({1}, DType::F32, dev);
  const int peer = tr.rank() == a ? b : a;
  auto round = [&] {
    if (tr.rank() == a) {
      tr.isend(x, peer, 1).wait();
      tr.irecv(x, peer, 1).wait();
    } else {
      tr.irecv(x, peer, 1).wait();
      tr.isend(x, peer, 1).wait();
    }
  };
  for (int i = 0; i < 10; ++i) round();
  const double cpu0 = comm_threads_cpu_s();
  auto t0 = Clock::now();
  for (int i = 0; i < iters; ++i) round();
  const double wall = seconds_since(t0);
  cpu_s = comm_threads_cpu_s() - cpu0;
  return wall / (2.0 * iters) * 1e6;
}

// a streams `bytes`-sized tensors to b, a few in flight, then b acknowledges.
// `cpu_GBps`: bytes streamed per CPU second of this rank's communication threads.
double measure_bandwidth_GBps(Transport& tr, Device dev, int a, int b, size_t bytes, double& cpu_GBps) {
  const int64_t n = static_cast<int64_t>(std::max<size_t>(bytes / 4, 1));
  const int reps = static_cast<int>(std::clamp<size_t>((256u << 20) / (n * 4), 4, 200));
  constexpr int kWindow = 4;
  std::vector<Tensor> bufs;
  for (int k = 0; k < kWindow; ++k) bufs.push_back(Tensor::zeros({n}, DType::F32, dev));
  Tensor ack = Tensor::zeros({1}, DType::F32, dev);
  auto stream = [&](int count) {
    std::vector<Request> inflight;
    for (int i = 0; i < count; ++i) {
      if (inflight.size() == kWindow) {
        inflight.front().wait();
        inflight.erase(inflight.begin());
      }
      Tensor& buf = bufs[i % kWindow];
      inflight.push_back(tr.rank() == a ? tr.isend(buf, b, 2) : tr.irecv(buf, a, 2));
    }
    wait_all(inflight);
    if (tr.rank() == a)
      tr.irecv(ack, b, 3).wait();
    else
      tr.isend(ack, a, 3).wait();
  };
  stream(2);  // warm-up: first-touch of pages, connection setup
  const double cpu0 = comm_threads_cpu_s();
  auto t0 = Clock::now();
  stream(reps);
  const double wall = seconds_since(t0), cpu = comm_threads_cpu_s() - cpu0;
  const double streamed = static_cast<double>(n) * 4 * reps;
  cpu_GBps = cpu > 0 ? streamed / cpu / 1e9 : 0.0;
  return streamed / wall / 1e9;
}

// a sends one `bytes`-sized tensor to b, b answers with one float, again
// and again: a pipeline's pattern (one activation or gradient at a time,
// its receiver waiting for it), not the stream's (several in flight, the
// communication threads never idle between them). Returns this rank's
// communication threads' CPU per round (one message end of each size).
double measure_one_at_a_time_cpu_s(Transport& tr, Device dev, int a, int b, size_t bytes) {
  const int64_t n = static_cast<int64_t>(std::max<size_t>(bytes / 4, 1));
  const int rounds = static_cast<int>(std::clamp<size_t>((32u << 20) / (n * 4), 4, 50));
  Tensor buf = Tensor::zeros({n}, DType::F32, dev), ack = Tensor::zeros({1}, DType::F32, dev);
  auto round = [&] {
    if (tr.rank() == a) {
      tr.isend(buf, b, 6).wait();
      tr.irecv(ack, b, 7).wait();
    } else {
      tr.irecv(buf, a, 6).wait();
      tr.isend(ack, a, 7).wait();
    }
  };
  round();  // warm-up
  const double cpu0 = comm_threads_cpu_s();
  for (int i = 0; i < rounds; ++i) round();
  return (comm_threads_cpu_s() - cpu0) / rounds;
}

// The median time of an all-reduce; `cpu_s`: this rank's communication
// threads' CPU per all-reduce (the mean over the timed ones).
double measure_allreduce_s(Transport& tr, Device dev, CommGroup& g, size_t bytes, double& cpu_s) {
  const int64_t n = static_cast<int64_t>(std::max<size_t>(bytes / 4, 1));
  const int iters = static_cast<int>(std::clamp<size_t>((64u << 20) / (n * 4), 3, 50));
  Tensor x = Tensor::zeros({n}, DType::F32, dev);
  tr.all_reduce(g, {x}, ReduceOp::Sum);  // warm-up
  std::vector<double> times;
  double cpu = 0;
  for (int i = 0; i < iters; ++i) {
    tr.barrier(g);
    const double cpu0 = comm_threads_cpu_s();
    auto t0 = Clock::now();
    tr.all_reduce(g, {x}, ReduceOp::Sum);
    times.push_back(seconds_since(t0));
    cpu += comm_threads_cpu_s() - cpu0;
  }
  cpu_s = cpu / iters;
  return median(times);
}

uint64_t host_memory_bytes() {
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

std::string human(size_t bytes) {
  char buf[32];
  if (bytes >= 1000000)
    snprintf(buf, sizeof buf, "%g MB", bytes / 1e6);
  else if (bytes >= 1000)
    snprintf(buf, sizeof buf, "%g KB", bytes / 1e3);
  else
    snprintf(buf, sizeof buf, "%zu B", bytes);
  return buf;
}

// Levels from innermost out (docs/design.md §5): ranks of one host, then
// hosts; each with the median over its pairs of the large-message bandwidth
// and the per-message latency.
json make_topology(Transport& tr, const std::vector<PairResult>& pairs, uint64_t worker_memory) {
  std::map<std::string, int> per_host;
  for (int r = 0; r < tr.world_size(); ++r) per_host[tr.host_of(r)]++;
  std::vector<double> intra, inter, intra_latency, inter_latency, intra_cpu, inter_cpu, intra_cpu_us, inter_cpu_us;
  for (auto& p : pairs) {
    (p.same_host ? intra : inter).push_back(p.large_message_GBps());
    (p.same_host ? intra_latency : inter_latency).push_back(p.latency_us);
    (p.same_host ? intra_cpu : inter_cpu).push_back(p.large_message_cpu_GBps());
    (p.same_host ? intra_cpu_us : inter_cpu_us).push_back(p.cpu_us_per_message);
  }
  int ranks_per_host = tr.world_size();
  for (auto& [host, n] : per_host) ranks_per_host = std::min(ranks_per_host, n);
  json levels = json::array();
  auto round3 = [](double v) { return std::round(v * 1000) / 1000; };
  // The communication threads' CPU per message and per byte at one end
  // (TopologyLevel::comm_cpu_GBps): the latency loop's and the largest
  // messages' stream.
  auto add_cpu = [&](json& level, const std::vector<double>& per_byte, const std::vector<double>& per_message) {
    if (median(per_byte) > 0) level["comm_cpu_GBps"] = round3(median(per_byte));
    if (median(per_message) > 0) level["comm_cpu_us_per_message"] = round3(median(per_message));
  };
  if (per_host.size() == 1) {
    levels.push_back({{"count", tr.world_size()}, {"bandwidth_GBps", round3(median(intra))},
                      {"latency_us", round3(median(intra_latency))}});
    add_cpu(levels.back(), intra_cpu, intra_cpu_us);
  } else {
    if (ranks_per_host != tr.world_size() / static_cast<int>(per_host.size()))
      std::cerr << "warning: hosts run different numbers of ranks; the topology assumes "
                << ranks_per_host << " per host\n";
    if (ranks_per_host > 1) {
      levels.push_back({{"count", ranks_per_host}, {"bandwidth_GBps", round3(median(intra))},
                        {"latency_us", round3(median(intra_latency))}});
      add_cpu(levels.back(), intra_cpu, intra_cpu_us);
    }
    levels.push_back({{"count", static_cast<int>(per_host.size())}, {"bandwidth_GBps", round3(median(inter))},
                      {"latency_us", round3(median(inter_latency))}});
    add_cpu(levels.back(), inter_cpu, inter_cpu_us);
  }
  return {{"levels", levels}, {"worker_memory_bytes", worker_memory}};
}

// Each level's all-reduce bus bandwidth (TopologyLevel::allreduce_GBps):
// that of the largest measured group of first ranks the level spans (inside
// host 0 for the innermost of several levels, across hosts for the outer),
// at the largest size measured; none below 1 MB, where the messages'
// latency, not the bandwidth, sets the time.
void add_allreduce_bandwidths(Transport& tr, const std::vector<AllReduceResult>& ars, json& topo) {
  std::map<std::string, int> per_host;
  for (int r = 0; r < tr.world_size(); ++r) per_host[tr.host_of(r)]++;
  int ranks_per_host = tr.world_size();
  for (auto& [host, n] : per_host) ranks_per_host = std::min(ranks_per_host, n);
  size_t largest_bytes = 0;
  for (const auto& a : ars) largest_bytes = std::max(largest_bytes, a.bytes);
  if (largest_bytes < 1000000) return;
  json& levels = topo["levels"];
  auto spans = [&](size_t level, int g) {
    if (levels.size() == 1) return true;
    return level == 0 ? g <= ranks_per_host : g > ranks_per_host;
  };
  for (size_t l = 0; l < levels.size(); ++l) {
    const AllReduceResult* widest = nullptr;
    for (const auto& a : ars)
      if (a.bytes == largest_bytes && spans(l, a.group_size) && (!widest || a.group_size > widest->group_size))
        widest = &a;
    if (widest) levels[l]["allreduce_GBps"] = widest->busbw_GBps();
  }
}

void print_tables(const std::vector<PairResult>& pairs, const std::vector<AllReduceResult>& ars,
                  CommTransport transport) {
  printf("point to point (transport: %s, tensors with header)\n", to_string(transport));
  printf("%6s %6s %6s %12s", "src", "dst", "host", "latency_us");
  if (!pairs.empty())
    for (auto& [bytes, bw] : pairs[0].bandwidth) printf(" %13s", (human(bytes) + " GB/s").c_str());
  printf("\n");
  for (auto& p : pairs) {
    printf("%6d %6d %6s %12.1f", p.a, p.b, p.same_host ? "same" : "other", p.latency_us);
    for (auto& [bytes, bw] : p.bandwidth) printf(" %13.2f", bw);
    printf("\n");
  }
  printf(transport == CommTransport::nccl ? "\nall-reduce (NCCL sum)\n" : "\nall-reduce (deterministic, rank-order sum)\n");
  printf("%6s %10s %10s %12s %12s\n", "ranks", "size", "time_ms", "algbw_GB/s", "busbw_GB/s");
  for (auto& r : ars)
    printf("%6d %10s %10.3f %12.2f %12.2f\n", r.group_size, human(r.bytes).c_str(), r.time_s * 1e3,
           r.algbw_GBps(), r.busbw_GBps());
  fflush(stdout);
}

// --transport's value. The GPU transports need a GPU before MPI starts:
// refuse early, exit 2.
CommTransport checked_transport(const std::string& flag) {
  CommTransport transport;
  if (flag == "mpi") transport = CommTransport::mpi;
  else if (flag == "staged") transport = CommTransport::staged;
  else if (flag == "nccl") transport = CommTransport::nccl;
  else
    throw UserError(cat("--transport ", flag, ": use mpi (host memory), staged (GPU memory through the host) or "
                        "nccl (GPU to GPU)"));
  if (transport == CommTransport::mpi) return transport;
  try {
    require_compute_device("cuda");
  } catch (const UserError& e) {
    throw UserError(cat("--transport ", flag, " measures GPU tensors: ", e.what()));
  }
  if (transport == CommTransport::nccl) {
    const CudaNcclApi* nccl = cuda_plugin()->nccl();
    if (!nccl || !nccl->available())
      throw UserError("--transport nccl: this CUDA backend was built without NCCL; use --transport staged");
  }
  return transport;
}

// All-reduce groups of bench-comm: the first g ranks, g = 2, 4, 8, ... and the world.
std::set<int> group_sizes(int world) {
  std::set<int> sizes;
  for (int g = 2; g <= world; g *= 2) sizes.insert(g);
  sizes.insert(world);
  return sizes;
}

// The options that need parsing, parsed (bad ones refused before MPI starts).
struct BenchCommPlan {
  std::vector<size_t> p2p_sizes, allreduce_sizes;
  bool memory_given = false;
  uint64_t worker_memory = 0;  // when given
};

BenchCommPlan parse_bench_options(const BenchCommOptions& o) {
  BenchCommPlan plan;
  for (auto& s : o.p2p_sizes) plan.p2p_sizes.push_back(parse_size(s));
  for (auto& s : o.allreduce_sizes) plan.allreduce_sizes.push_back(parse_size(s));
  if (o.latency_iters < 1) throw UserError("--latency-iters must be at least 1");
  plan.memory_given = !o.worker_memory.empty();
  if (plan.memory_given) plan.worker_memory = parse_size(o.worker_memory);
  return plan;
}

// Every measurement as a JSON line to --jsonl (a file, or stdout for "-").
// Every rank opens it (a bad path is refused before MPI starts); only rank 0
// writes to it.
class MeasurementLog {
 public:
  explicit MeasurementLog(const std::string& path) : to_stdout_(path == "-") {
    if (path.empty() || to_stdout_) return;
    file_ = std::make_unique<std::ofstream>(path);
    if (!*file_) throw UserError(cat("cannot write --jsonl file '", path, "'"));
  }
  void operator()(const json& j) {
    if (file_) *file_ << j.dump() << "\n";
    if (to_stdout_) std::cout << j.dump() << "\n";
  }

 private:
  std::unique_ptr<std::ofstream> file_;
  bool to_stdout_;
};

std::vector<int> first_ranks(int count) {
  std::vector<int> ranks(static_cast<size_t>(count));
  std::iota(ranks.begin(), ranks.end(), 0);
  return ranks;
}

// The GPU transports wrap MPI; null for --transport mpi (MPI itself measures).
std::unique_ptr<Transport> gpu_transport(CommTransport transport, MpiTransport& mpi, const Device& dev) {
  if (transport == CommTransport::staged) return std::make_unique<StagedTransport>(mpi);
  if (transport != CommTransport::nccl) return nullptr;
  NcclLinks links = NcclLinks::all_pairs(mpi.world_size());
  links.groups.clear();
  for (int g : group_sizes(mpi.world_size())) links.groups.push_back(first_ranks(g));
  return std::make_unique<NcclTransport>(mpi, dev, links);
}

// One pair: a and b measure; a's figures go to rank 0 (which fills p).
void measure_pair(Transport& tr, const Device& dev, const BenchCommPlan& plan, int latency_iters, PairResult& p) {
  const int me = tr.rank(), a = p.a, b = p.b;
  const size_t sizes = plan.p2p_sizes.size();
  if (me == a || me == b) {
    double latency_cpu_s = 0;
    p.latency_us = measure_latency_us(tr, dev, a, b, latency_iters, latency_cpu_s);
    p.cpu_us_per_message = latency_cpu_s / (2.0 * latency_iters) * 1e6;
    for (size_t bytes : plan.p2p_sizes) {
      double streamed_cpu_GBps = 0;
      p.bandwidth.push_back({bytes, measure_bandwidth_GBps(tr, dev, a, b, bytes, streamed_cpu_GBps)});
      // The CPU per byte a run pays: one message at a time, less the two
      // message ends' per-message CPU (the latency loop's). A stream moves
      // bytes for less (its threads poll hot between back-to-back messages).
      const double round_cpu_s = measure_one_at_a_time_cpu_s(tr, dev, a, b, bytes);
      const double per_bytes_s = round_cpu_s - 2e-6 * p.cpu_us_per_message;
      p.cpu_GBps.push_back(per_bytes_s > 0 ? double(bytes) / per_bytes_s / 1e9 : streamed_cpu_GBps);
    }
    // One end's CPU: the mean of the two ends' (b's go to a).
    std::vector<float> mine = {static_cast<float>(p.cpu_us_per_message)};
    for (double c : p.cpu_GBps) mine.push_back(static_cast<float>(c));
    if (me == b) {
      tr.isend(Tensor::from_floats(mine, {static_cast<int64_t>(mine.size())}), a, 5).wait();
    } else {
      Request r = tr.irecv_any(b, 5);
      r.wait();
      const float* v = r.tensor().f32();
      p.cpu_us_per_message = 0.5 * (p.cpu_us_per_message + v[0]);
      for (size_t k = 0; k < sizes; ++k)
        p.cpu_GBps[k] = p.cpu_GBps[k] > 0 && v[k + 1] > 0 ? 2.0 / (1.0 / p.cpu_GBps[k] + 1.0 / v[k + 1]) : 0.0;
    }
  }
  if (a != 0 && me == a) {
    std::vector<float> v = {static_cast<float>(p.latency_us), static_cast<float>(p.cpu_us_per_message)};
    for (auto& [bytes, bw] : p.bandwidth) v.push_back(static_cast<float>(bw));
    for (double c : p.cpu_GBps) v.push_back(static_cast<float>(c));
    tr.isend(Tensor::from_floats(v, {static_cast<int64_t>(v.size())}), 0, 4).wait();
  } else if (a != 0 && me == 0) {
    Request r = tr.irecv_any(a, 4);
    r.wait();
    const float* v = r.tensor().f32();
    p.latency_us = v[0];
    p.cpu_us_per_message = v[1];
    for (size_t k = 0; k < sizes; ++k) p.bandwidth.push_back({plan.p2p_sizes[k], v[k + 2]});
    for (size_t k = 0; k < sizes; ++k) p.cpu_GBps.push_back(v[sizes + k + 2]);
  }
}

// Point to point, one pair at a time so pairs do not share cores/links.
// Rank 0 gets every pair's figures; the others an empty list.
std::vector<PairResult> measure_pairs(Transport& tr, const MpiTransport& mpi, const Device& dev,
                                      const BenchCommPlan& plan, const BenchCommOptions& o, MeasurementLog& log) {
  std::vector<PairResult> pairs;
  for (int a = 0; a < tr.world_size(); ++a) {
    for (int b = a + 1; b < tr.world_size(); ++b) {
      tr.barrier();
      PairResult p{a, b, tr.host_of(a) == tr.host_of(b)};
      measure_pair(tr, dev, plan, o.latency_iters, p);
      if (tr.rank() != 0) continue;
      pairs.push_back(p);
      for (size_t k = 0; k < p.bandwidth.size(); ++k)
        log({{"kind", "p2p"}, {"transport", to_string(o.transport)}, {"path", path_among(tr, mpi, o.transport, {a, b})},
             {"src", a}, {"dst", b}, {"same_host", p.same_host},
             {"bytes", p.bandwidth[k].first}, {"latency_us", p.latency_us}, {"bandwidth_GBps", p.bandwidth[k].second},
             {"comm_cpu_us_per_message", p.cpu_us_per_message}, {"comm_cpu_GBps", p.cpu_GBps[k]}});
    }
  }
  return pairs;
}

// All-reduce over the first g ranks for g = 2, 4, 8, ... and the world.
// Rank 0 gets every result; the others an empty list.
std::vector<AllReduceResult> measure_allreduces(Transport& tr, const MpiTransport& mpi, const Device& dev,
                                                const BenchCommPlan& plan, const BenchCommOptions& o,
                                                MeasurementLog& log) {
  std::vector<AllReduceResult> ars;
  for (int g : group_sizes(tr.world_size())) {
    std::shared_ptr<CommGroup> group = tr.rank() < g ? tr.make_group(first_ranks(g)) : nullptr;
    for (size_t bytes : plan.allreduce_sizes) {
      tr.barrier();
      if (!group) continue;
      double cpu_s = 0;
      AllReduceResult r{g, bytes, measure_allreduce_s(tr, dev, *group, bytes, cpu_s)};
      if (tr.rank() != 0) continue;
      ars.push_back(r);
      // Rank 0's communication threads (a host's first rank: on 2 hosts it
      // both copies through shared memory and sends over MPI).
      log({{"kind", "allreduce"}, {"transport", to_string(o.transport)},
           {"path", path_among(tr, mpi, o.transport, first_ranks(g))}, {"group_size", g}, {"bytes", bytes},
           {"time_ms", r.time_s * 1e3}, {"algbw_GBps", r.algbw_GBps()}, {"busbw_GBps", r.busbw_GBps()},
           {"rank0_comm_cpu_ms", cpu_s * 1e3}});
    }
  }
  return ars;
}

// Memory per worker: the host's memory shared by the ranks on it, the
// smallest share over hosts (known on rank 0).
uint64_t smallest_memory_share(Transport& tr) {
  const int world = tr.world_size(), me = tr.rank();
  int on_my_host = 0;
  for (int r = 0; r < world; ++r) on_my_host += tr.host_of(r) == tr.host_of(me);
  Tensor mine = Tensor::zeros({1}, DType::I64);
  mine.data<int64_t>()[0] = static_cast<int64_t>(host_memory_bytes() / on_my_host);
  if (me != 0) {
    tr.isend(mine, 0, 6).wait();
    return 0;
  }
  uint64_t smallest = static_cast<uint64_t>(mine.data<int64_t>()[0]);
  for (int r = 1; r < world; ++r) {
    Request q = tr.irecv_any(r, 6);
    q.wait();
    smallest = std::min<uint64_t>(smallest, q.tensor().data<int64_t>()[0]);
  }
  return smallest;
}

// Written whole or not at all (nothing left behind on failure).
void write_topology_file(const std::string& path, const json& topo) {
  write_file_atomically(path, topo.dump(2) + "\n");
  printf("wrote %s\n", path.c_str());
}

void run_bench_comm(BenchCommOptions o) {
  check_output_file("-o", o.topology_path);
  if (o.jsonl_path != "-") check_output_file("--jsonl", o.jsonl_path);
  o.transport = checked_transport(o.transport_flag);
  if (!launched_under_mpi())
    throw UserError("bench-comm measures communication between ranks: run it under MPI, e.g. "
                    "`mpirun -np 4 pipedream bench-comm -o topology.json`");
  const BenchCommPlan plan = parse_bench_options(o);
  MeasurementLog log(o.jsonl_path);

  MpiTransport mpi(o.timeout_s);
  if (mpi.world_size() < 2) throw UserError("bench-comm needs at least 2 ranks (mpirun -np 2 or more)");
  mpi.use_shared_memory(o.same_host == "shm");
  const Device dev = o.transport == CommTransport::mpi ? Device::cpu() : open_compute_device("cuda");
  std::unique_ptr<Transport> gpu = gpu_transport(o.transport, mpi, dev);
  Transport& tr = gpu ? *gpu : static_cast<Transport&>(mpi);

  const std::vector<PairResult> pairs = measure_pairs(tr, mpi, dev, plan, o, log);
  const std::vector<AllReduceResult> ars = measure_allreduces(tr, mpi, dev, plan, o, log);
  const uint64_t worker_memory = plan.memory_given ? plan.worker_memory : smallest_memory_share(tr);
  tr.barrier();

  if (tr.rank() != 0) return;
  printf("same-host path: %s\n", mpi.shared_memory_on() ? "shared memory (shm)" : "MPI (mpi)");
  print_tables(pairs, ars, o.transport);
  json topo = make_topology(tr, pairs, worker_memory);
  add_allreduce_bandwidths(tr, ars, topo);
  log({{"kind", "topology"}, {"topology", topo}});
  printf("\ntopology (median over pairs of the %s bandwidth): %s\n",
         human(*std::max_element(plan.p2p_sizes.begin(), plan.p2p_sizes.end())).c_str(), topo.dump().c_str());
  if (!o.topology_path.empty()) write_topology_file(o.topology_path, topo);
}

}  // namespace

void add_bench_comm_command(CLI::App& app) {
  auto opts = std::make_shared<BenchCommOptions>();
  auto* cmd = app.add_subcommand(
      "bench-comm",
      "Measure point-to-point and all-reduce performance between ranks (run under mpirun) and "
      "write a topology file for `pipedream plan`");
  cmd->add_option("-o,--output", opts->topology_path, "Write the measured topology JSON here");
  cmd->add_option("--jsonl", opts->jsonl_path, "Write every measurement as a JSON line to FILE ('-': stdout)");
  cmd->add_option("--p2p-sizes", opts->p2p_sizes, "Message sizes for point-to-point bandwidth")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--allreduce-sizes", opts->allreduce_sizes, "Buffer sizes for all-reduce")
      ->delimiter(',')
      ->capture_default_str();
  cmd->add_option("--latency-iters", opts->latency_iters, "Round trips per pair for latency")
      ->capture_default_str();
  cmd->add_option("--worker-memory", opts->worker_memory,
                  "Memory per worker to record in the topology (default: host memory / ranks on the host)");
  cmd->add_option("--timeout", opts->timeout_s, "Seconds a rank waits for a peer before failing")
      ->capture_default_str();
  cmd->add_option("--transport", opts->transport_flag,
                  "mpi (host tensors) | staged (GPU tensors through host memory) | nccl (GPU to GPU, one GPU per rank)")
      ->capture_default_str();
  cmd->add_option("--same-host", opts->same_host,
                  "shm (ranks of one host through a shared-memory segment) | mpi (through MPI, to compare)")
      ->check(CLI::IsMember({"shm", "mpi"}))
      ->capture_default_str();
  cmd->callback([opts] { run_bench_comm(*opts); });
}

}  // namespace pd::cli
