#pragma once
// Tied parameters: one weight read by several top-level layers (GPT-2's
// token embedding, read again by the output head). Each reading layer
// holds its own copy, initialised to the first reader's values; before
// every optimizer step the copies' gradients are summed in member order
// (tied_sum: the first reader's first) and every copy takes that sum, so
// all apply the same update and never drift apart. Files (--save, export,
// checkpoints) hold the tensor once, under the first reader's name; a copy
// is filled from it. Clipping counts the tensor once (the first reader's).
// `train` and every pipeline do exactly this, in this order, whichever
// stages the readers are in (runtime/tied_gradients.h exchanges them).
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/tensor.h"

namespace pd {

struct Model;
class ParameterStore;

struct TiedTensor {
  int layer = 0;     // top-level layer index
  std::string name;  // the layer's parameter ("token.weight", "weight")
};

struct TieGroup {
  std::vector<TiedTensor> members;  // ascending layers, two or more; members[0] names the tensor in files
  const TiedTensor& owner() const { return members.front(); }
};

// "{layer}.{name}": where ParameterStore keeps a member.
std::string stored_name(const TiedTensor& t);
// The owner's stored name when (layer, name) is a copy (a member after the
// first), else "".
std::string tie_owner_of(const Model& m, int layer, const std::string& name);
// PD_CHECKs the groups of m against its layers: members exist, share one
// shape, ascend, no parameter in two groups.
void check_ties(const Model& m);
// The spec's "ties": [["embed.token.weight", "head.weight"], ...] (layer
// name, then the layer's parameter) as groups; UserError naming the entry.
std::vector<TieGroup> parse_ties(const Model& m, const nlohmann::json& ties);

// The tied gradient: the members' gradients added in member order,
// ((g0 + g1) + g2) + ..., into a new tensor on g0's device.
Tensor tied_sum(const std::vector<Tensor>& member_grads);
// `train`: every group's members are in `grads`; each takes the tied sum.
void sum_tied_gradients(const Model& m, ParameterStore& grads);

// One line per group for `pipedream models`: "0.token.weight [256, 256], 256 KiB: read by embed (0), head (6)".
std::vector<std::string> describe_ties(const Model& m);

}  // namespace pd
