#include "models/ties.h"

#include <algorithm>
#include <set>

#include "core/device_ops.h"
#include "core/error.h"
#include "core/text.h"
#include "models/model.h"
#include "models/parameters.h"

namespace pd {

std::string stored_name(const TiedTensor& t) { return stored_tensor_name(t.layer, t.name); }

std::string tie_owner_of(const Model& m, int layer, const std::string& name) {
  for (const TieGroup& g : m.ties)
    for (size_t k = 1; k < g.members.size(); ++k)
      if (g.members[k].layer == layer && g.members[k].name == name) return stored_name(g.owner());
  return "";
}

namespace {

const ParamSpec* find_param(const Model& m, const TiedTensor& t, std::vector<ParamSpec>& specs) {
  if (t.layer < 0 || t.layer >= m.size()) return nullptr;
  specs = m.layer(t.layer).param_specs();
  for (const ParamSpec& p : specs)
    if (p.name == t.name) return &p;
  return nullptr;
}

}  // namespace

void check_ties(const Model& m) {
  std::set<std::pair<int, std::string>> seen;
  for (const TieGroup& g : m.ties) {
    PD_CHECK(g.members.size() >= 2, m.name, ": a tie group needs two or more members");
    Shape shape;
    for (size_t k = 0; k < g.members.size(); ++k) {
      const TiedTensor& t = g.members[k];
      std::vector<ParamSpec> specs;
      const ParamSpec* p = find_param(m, t, specs);
      PD_CHECK(p, m.name, ": tied parameter ", stored_name(t), " is not a parameter of the model");
      if (k == 0) shape = p->shape;
      PD_CHECK(p->shape == shape, m.name, ": tied parameters ", stored_name(g.owner()), " and ", stored_name(t),
               " differ in shape");
      PD_CHECK(k == 0 || t.layer > g.members[k - 1].layer, m.name, ": tie group members must be in ascending layers");
      PD_CHECK(seen.insert({t.layer, t.name}).second, m.name, ": ", stored_name(t), " is in two tie groups");
    }
  }
}

std::vector<TieGroup> parse_ties(const Model& m, const nlohmann::json& ties) {
  const std::string where = "model spec: field 'ties'";
  if (!ties.is_array()) throw UserError(cat(where, " must be an array of [\"layer.param\", ...] groups"));
  std::vector<TieGroup> out;
  for (size_t i = 0; i < ties.size(); ++i) {
    const nlohmann::json& g = ties[i];
    if (!g.is_array() || g.size() < 2)
      throw UserError(cat(where, "[", i, "] must list two or more parameters, as [\"embed.token.weight\", \"head.weight\"]"));
    TieGroup group;
    for (const nlohmann::json& e : g) {
      if (!e.is_string()) throw UserError(cat(where, "[", i, "]: entries are strings \"layer.param\""));
      const std::string s = e.get<std::string>();
      bool found = false;
      for (int l = 0; l < m.size() && !found; ++l) {
        const std::string& lname = m.layers[static_cast<size_t>(l)].name;
        if (s.size() <= lname.size() + 1 || s.compare(0, lname.size(), lname) != 0 || s[lname.size()] != '.') continue;
        const std::string param = s.substr(lname.size() + 1);
        for (const ParamSpec& p : m.layer(l).param_specs())
          if (p.name == param) {
            group.members.push_back({l, param});
            found = true;
          }
      }
      if (!found) throw UserError(cat(where, "[", i, "]: '", s, "' names no layer's parameter (\"layer.param\")"));
    }
    std::sort(group.members.begin(), group.members.end(), [](const TiedTensor& a, const TiedTensor& b) { return a.layer < b.layer; });
    for (size_t k = 1; k < group.members.size(); ++k)
      if (group.members[k].layer == group.members[k - 1].layer)
        throw UserError(cat(where, "[", i, "]: two members in layer ", m.layers[size_t(group.members[k].layer)].name,
                            " (a tie joins different layers)"));
    std::vector<ParamSpec> a, b;
    const Shape s0 = find_param(m, group.owner(), a)->shape;
    for (const TiedTensor& t : group.members)
      if (find_param(m, t, b)->shape != s0)
        throw UserError(cat(where, "[", i, "]: ", m.layers[size_t(t.layer)].name, ".", t.name, " is ",
                            shape_str(find_param(m, t, b)->shape), ", ", m.layers[size_t(group.owner().layer)].name,
                            ".", group.owner().name, " is ", shape_str(s0), " (tied parameters share one shape)"));
    out.push_back(std::move(group));
  }
  return out;
}

Tensor tied_sum(const std::vector<Tensor>& member_grads) {
  PD_CHECK(!member_grads.empty(), "tied_sum of nothing");
  Tensor total = member_grads.front().clone();
  const DeviceOps& ops = device_ops(total.device());
  for (size_t k = 1; k < member_grads.size(); ++k) {
    PD_CHECK(member_grads[k].numel() == total.numel(), "tied gradients differ in size");
    ops.add(total.numel(), total.f32(), member_grads[k].f32(), total.f32());
  }
  return total;
}

void sum_tied_gradients(const Model& m, ParameterStore& grads) {
  for (const TieGroup& g : m.ties) {
    std::vector<Tensor> held;
    for (const TiedTensor& t : g.members) held.push_back(grads.param(stored_name(t)));
    const Tensor total = tied_sum(held);
    for (Tensor& t : held) t.copy_from(total);
  }
}

std::vector<std::string> describe_ties(const Model& m) {
  std::vector<std::string> out;
  for (const TieGroup& g : m.ties) {
    std::vector<ParamSpec> specs;
    const ParamSpec* p = find_param(m, g.owner(), specs);
    const Shape shape = p ? p->shape : Shape{};
    std::string readers;
    for (const TiedTensor& t : g.members)
      readers += cat(readers.empty() ? "" : ", ", m.layers[size_t(t.layer)].name, " (layer ", t.layer, ")");
    out.push_back(cat(stored_name(g.owner()), " ", shape_str(shape), ", ", bytes_text(double(shape_numel(shape)) * 4),
                      ": read by ", readers));
  }
  return out;
}

}  // namespace pd
