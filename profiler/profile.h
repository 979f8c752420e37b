#pragma once
// The profile format (docs/design.md §4): per-layer costs of a model on a device.
// No dependency on the compute core: the planner reads this alone.
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/precision.h"

namespace pd {

// A node's times at a smaller batch than the profile's (a flush schedule's
// microbatch): `pipedream profile --microbatches M` measures them at
// batch_size / M, because small batches cost more per sample than a linear
// share of the minibatch's time (resnet18's 4-image microbatch: 2.3x).
struct BatchTimes {
  int batch = 0;
  double forward_ms = 0, backward_ms = 0;
};

struct ProfileNode {
  int id = 0;
  std::string name;         // "conv1" or PipeDream's description
  std::string op;           // "conv2d"; empty for graph.txt
  double forward_ms = 0, backward_ms = 0;
  double forward_p90_ms = 0, backward_p90_ms = 0;
  uint64_t output_bytes = 0;      // activation sent to the next layer
  uint64_t activation_bytes = 0;  // kept for backward (stashed)
  uint64_t parameter_bytes = 0;
  uint64_t optimizer_state_bytes = 0;
  // Working memory of the layer's forward or backward, whichever is more:
  // what it allocates beyond its inputs while it runs, plus, in the
  // backward, the gradient it receives (0: not measured, e.g. graph.txt).
  uint64_t workspace_bytes = 0;
  // The working memory of the layer's forward: its output and its
  // temporaries at their peak, not its input or the context it keeps
  // (activation_bytes; 0: not measured, readers then take workspace_bytes).
  uint64_t forward_workspace_bytes = 0;
  // Of activation_bytes, what the previous layer (the one before it in a
  // chain) keeps too, the same tensor: a stage holding both holds it once
  // (0: none, or not measured).
  uint64_t shared_activation_bytes = 0;
  // What the layer keeps from its input-gradient pass (B) until its
  // weight-gradient pass (W) where the schedule splits them (zb-h1, zb-h2,
  // the V shapes): the context backward_weights needs, its output gradient
  // included (0: the layer does not split, or not measured).
  uint64_t weight_pass_bytes = 0;
  // What its W allocates beyond that context while it runs (often 0: the
  // weight gradient accumulates into its buffer); unset: not measured,
  // readers then take workspace_bytes.
  std::optional<uint64_t> weight_workspace_bytes;
  // The optimizer's update of this node's parameters, once per minibatch
  // (0: not measured, e.g. graph.txt). The planner's cost model leaves it
  // out, as PipeDream's does; simulate counts it (plan stages' optimizer_s).
  double optimizer_ms = 0;
  int source_line = 0;  // line of the file it was read from (graph.txt order matters to PipeDream)
  std::vector<BatchTimes> at_batch;  // ascending batch, each below the profile's batch_size
  const BatchTimes* times_at(int batch) const;  // nullptr: not measured at that batch
};

// A parameter read by several nodes (a tied weight, models/ties.h): each
// reading node's parameter_bytes and optimizer_state_bytes count its own
// copy; a plan that puts readers in different stages exchanges `bytes` of
// gradient between those stages once per optimizer step.
struct ProfileTie {
  std::string parameter;   // the name files hold it under ("0.token.weight")
  uint64_t bytes = 0;      // one copy
  std::vector<int> nodes;  // ids of the reading nodes, ascending
};

// Which reader a profile came from: ours (profile_json) or PipeDream's
// graph.txt, whose graph the planner preprocesses as PipeDream does.
enum class ProfileSource { json, graph_txt };

struct Profile {
  std::string format = "pipedream-profile/1";
  std::string source_path;  // where it was read from
  ProfileSource source_kind = ProfileSource::json;
  std::string sha256;       // of the file's bytes
  std::string model, device = "cpu", dtype = "f32";
  // How `profile` was told to build the model (its --model, --model-spec
  // and --model-options, as given; empty when not recorded, as in older
  // profiles and graph.txt): the flags a printed `run` command repeats.
  std::string model_argument, model_spec_file, model_options;
  // The precision the layers ran in ("precision" in the JSON, absent for
  // fp32): under bf16 output_bytes and activation_bytes count 2 bytes an element.
  Precision precision = Precision::FP32;
  int batch_size = 0, threads = 1;
  double step_forward_backward_ms = 0;
  // How the times were measured (0 = not recorded, e.g. graph.txt): warm-up
  // and measured iterations, and the seconds the measured ones took.
  int warmup_iterations = 0, measured_iterations = 0;
  double measured_seconds = 0;
  // Median time of a fixed 256^3 GEMM run between the measured iterations
  // (CPU profiles; 0 = not measured): the host's speed while measuring.
  // Profiles of one model whose probes differ were taken on a machine
  // running at different speeds, and their layer times differ about as much.
  double host_probe_ms = 0;
  std::vector<ProfileNode> nodes;
  std::vector<std::pair<int, int>> edges;  // (from id, to id)
  std::vector<ProfileTie> ties;            // "tie_groups"
  bool is_chain() const;  // edges are exactly i -> i+1 in node order
  // The smaller batches every node has times at (BatchTimes), ascending.
  std::vector<int> measured_microbatch_sizes() const;
};

// Detects the format (JSON or graph.txt) from the content. Throws UserError
// with file:line for malformed input (bad numbers, unknown node in an edge,
// cycles, empty graph).
Profile read_profile(const std::string& path);
Profile parse_profile_json(const std::string& text, const std::string& source);
Profile parse_graph_txt(const std::string& text, const std::string& source);
// Whether the profile weighed what B keeps for W (ProfileNode::
// weight_pass_bytes): older profiles, graph.txt and imported graphs did not.
bool records_weight_passes(const Profile& p);
void write_profile_json(const Profile& p, const std::string& path);  // atomic
std::string sha256_hex(const std::string& bytes);

}  // namespace pd
