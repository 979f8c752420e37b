#include "models/parameters.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <iterator>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "models/sharded_weights.h"

namespace pd {

namespace {

// A tie owner's initial values (CPU), whichever layers a store holds: the
// owner layer initialised on its own, as a whole-model build does.
Tensor initial_tied_value(const Model& m, const std::string& owner, uint64_t seed) {
  for (const TieGroup& g : m.ties) {
    if (stored_name(g.owner()) != owner) continue;
    const Layer& l = m.layer(g.owner().layer);
    std::vector<Tensor> p = allocate_params(l, Device::cpu()), b = allocate_buffers(l, Device::cpu());
    l.init(p, b, CounterRng(seed, static_cast<uint32_t>(g.owner().layer), 0));
    const auto ps = l.param_specs();
    for (size_t k = 0; k < ps.size(); ++k)
      if (ps[k].name == g.owner().name) return p[k];
  }
  PD_CHECK(false, "no tie group owns ", owner);
  return {};
}

}  // namespace

ParameterStore ParameterStore::create(const Model& m, int first, int last, uint64_t seed, Device d) {
  PD_CHECK(first >= 0 && last < m.size() && first <= last + 1, "bad layer range [", first, ", ", last, "] of ",
           m.size(), " layers");
  ParameterStore s;
  s.first_ = first;
  s.last_ = last;
  s.device_ = d;
  for (int i = first; i <= last; ++i) {
    const Layer& l = m.layer(i);
    s.param_begin_.push_back(s.params_.size());
    s.buffer_begin_.push_back(s.buffers_.size());
    std::vector<Tensor> p = allocate_params(l, Device::cpu()), b = allocate_buffers(l, Device::cpu());
    l.init(p, b, CounterRng(seed, static_cast<uint32_t>(i), 0));
    const auto ps = l.param_specs(), bs = l.buffer_specs();
    for (size_t k = 0; k < p.size(); ++k) {
      const std::string owner = tie_owner_of(m, i, ps[k].name);
      if (!owner.empty()) p[k].copy_from(initial_tied_value(m, owner, seed));
      s.params_.push_back(d.is_cpu() ? p[k] : p[k].to(d));
      s.param_names_.push_back(stored_tensor_name(i, ps[k].name));
      s.saved_names_.push_back(owner.empty() ? s.param_names_.back() : owner);
    }
    for (size_t k = 0; k < b.size(); ++k) {
      s.buffers_.push_back(d.is_cpu() ? b[k] : b[k].to(d));
      s.buffer_names_.push_back(stored_tensor_name(i, bs[k].name));
    }
  }
  s.param_begin_.push_back(s.params_.size());
  s.buffer_begin_.push_back(s.buffers_.size());
  return s;
}

std::span<Tensor> ParameterStore::params(int layer) {
  PD_CHECK(holds(layer), "layer ", layer, " is not in this store [", first_, ", ", last_, "]");
  size_t k = static_cast<size_t>(layer - first_);
  return {params_.data() + param_begin_[k], param_begin_[k + 1] - param_begin_[k]};
}

std::span<const Tensor> ParameterStore::params(int layer) const {
  return const_cast<ParameterStore*>(this)->params(layer);
}

std::span<Tensor> ParameterStore::buffers(int layer) const {
  PD_CHECK(holds(layer), "layer ", layer, " is not in this store [", first_, ", ", last_, "]");
  size_t k = static_cast<size_t>(layer - first_);
  auto* self = const_cast<ParameterStore*>(this);
  return {self->buffers_.data() + buffer_begin_[k], buffer_begin_[k + 1] - buffer_begin_[k]};
}

Tensor& ParameterStore::param(const std::string& stored) {
  for (size_t i = 0; i < params_.size(); ++i)
    if (param_names_[i] == stored) return params_[i];
  PD_CHECK(false, "parameter ", stored, " is not in this store [", first_, ", ", last_, "]");
  return params_.front();
}

std::vector<Tensor> ParameterStore::params_counted_once() const {
  std::vector<Tensor> out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!is_tie_copy(i)) out.push_back(params_[i]);
  return out;
}

int64_t ParameterStore::param_count() const {
  int64_t n = 0;
  for (const Tensor& t : params_) n += t.numel();
  return n;
}

size_t ParameterStore::param_bytes() const {
  size_t n = 0;
  for (const Tensor& t : params_) n += t.nbytes();
  return n;
}

ParameterStore ParameterStore::clone_params() const {
  ParameterStore s = *this;
  for (Tensor& t : s.params_) t = t.clone();
  return s;
}

ParameterStore ParameterStore::zeros_like_params() const {
  ParameterStore s = *this;
  for (Tensor& t : s.params_) t = Tensor::zeros(t.shape(), t.dtype(), t.device());
  s.buffers_.clear();
  s.buffer_names_.clear();
  std::fill(s.buffer_begin_.begin(), s.buffer_begin_.end(), 0);
  return s;
}

void ParameterStore::zero_params() {
  for (Tensor& t : params_) t.zero();
}

void ParameterStore::copy_params_from(const ParameterStore& other) {
  PD_CHECK(other.params_.size() == params_.size() && other.first_ == first_, "copy between different layouts");
  for (size_t i = 0; i < params_.size(); ++i) params_[i].copy_from(other.params_[i]);
}

void ParameterStore::swap_params(ParameterStore& other) {
  PD_CHECK(other.params_.size() == params_.size() && other.first_ == first_, "swap between different layouts");
  params_.swap(other.params_);
}

NamedTensors ParameterStore::named_tensors() const {
  NamedTensors out;
  for (size_t i = 0; i < params_.size(); ++i)
    if (!is_tie_copy(i)) out.emplace_back(param_names_[i], params_[i]);
  for (size_t i = 0; i < buffers_.size(); ++i) out.emplace_back(buffer_names_[i], buffers_[i]);
  return out;
}

void ParameterStore::load(const NamedTensors& tensors, const std::string& source) {
  std::unordered_map<std::string, const Tensor*> by_name;
  for (const auto& [n, t] : tensors) by_name[n] = &t;
  auto fill = [&](const std::vector<std::string>& names, std::vector<Tensor>& dst) {
    for (size_t i = 0; i < names.size(); ++i) {
      auto it = by_name.find(names[i]);
      if (it == by_name.end()) throw UserError(cat(source, " has no tensor '", names[i], "' (wrong model?)"));
      const Tensor& src = *it->second;
      if (src.shape() != dst[i].shape() || src.dtype() != dst[i].dtype())
        throw UserError(cat(source, ": tensor '", names[i], "' is ", shape_str(src.shape()), " ",
                            dtype_name(src.dtype()), ", the model needs ", shape_str(dst[i].shape()), " ",
                            dtype_name(dst[i].dtype())));
      dst[i].copy_from(src);
    }
  };
  fill(saved_names_, params_);
  fill(buffer_names_, buffers_);
}

namespace {

// The safetensors files `paths` name (a folder: its *.safetensors files,
// sorted), and the paths joined for messages.
std::vector<std::string> weight_file_paths(const std::vector<std::string>& paths, std::string* source) {
  namespace fs = std::filesystem;
  if (paths.empty()) throw UserError("no weight files given");
  std::vector<std::string> out;
  for (const std::string& given : paths) {
    *source += (source->empty() ? "" : " + ") + given;
    const std::string p = resolve_weight_path(given);
    if (is_weight_index(p)) {  // a sharded save: every shard it names
      for (const std::string& f : weight_index_files(p)) out.push_back(f);
      continue;
    }
    std::error_code ec;
    if (!fs::is_directory(p, ec)) {
      out.push_back(p);  // a missing file is the safetensors reader's UserError
      continue;
    }
    std::vector<std::string> files;
    fs::directory_iterator it(p, ec);
    for (; !ec && it != fs::directory_iterator(); it.increment(ec))
      if (it->path().extension() == ".safetensors") files.push_back(it->path().string());
    if (ec) throw UserError(cat(p, ": the weights folder cannot be listed: ", ec.message()));
    if (files.empty()) throw UserError(cat(p, " is a folder without .safetensors files (give a checkpoint's step-N folder)"));
    std::sort(files.begin(), files.end());
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
}

}  // namespace

WeightFiles read_weight_files(const std::vector<std::string>& paths) {
  WeightFiles out;
  for (const std::string& file : weight_file_paths(paths, &out.source)) {
    NamedTensors t = load_safetensors(file);
    out.tensors.insert(out.tensors.end(), std::make_move_iterator(t.begin()), std::make_move_iterator(t.end()));
  }
  return out;
}

namespace {

struct ModelTensor {
  std::string stored, own;  // "4.conv1.weight", "conv1.weight"
  Shape shape;
};

std::vector<ModelTensor> model_tensors(const Model& m) {
  std::vector<ModelTensor> out;
  for (int i = 0; i < m.size(); ++i) {
    const Layer& l = m.layer(i);
    for (const ParamSpec& p : l.param_specs())  // a tie copy is filled from its owner's tensor
      if (tie_owner_of(m, i, p.name).empty()) out.push_back({stored_tensor_name(i, p.name), p.name, p.shape});
    for (const ParamSpec& b : l.buffer_specs()) out.push_back({stored_tensor_name(i, b.name), b.name, b.shape});
  }
  return out;
}

// A checkpoint's optimizer slots (`optimizer.{slot}.{layer}.{name}`) and
// older weight versions (`version.{v}.{layer}.{name}`) are not weights.
bool ignored_weight(const std::string& name) {
  const std::string counter = ".num_batches_tracked";
  return name.rfind("optimizer.", 0) == 0 || name.rfind("version.", 0) == 0 || name == counter.substr(1) ||
         (name.size() > counter.size() && name.compare(name.size() - counter.size(), counter.size(), counter) == 0);
}

// "4.conv1.weight" -> "conv1.weight"; a name without a layer number: "".
std::string without_layer(const std::string& name) {
  size_t k = 0;
  while (k < name.size() && std::isdigit(static_cast<unsigned char>(name[k]))) ++k;
  return k > 0 && k + 1 < name.size() && name[k] == '.' ? name.substr(k + 1) : "";
}

std::string name_list(const std::vector<std::string>& names) {
  std::string out;
  const size_t shown = std::min<size_t>(names.size(), 5);
  for (size_t i = 0; i < shown; ++i) out += cat(i ? ", " : "", "'", names[i], "'");
  if (names.size() > shown) out += cat(" and ", names.size() - shown, " more");
  return out;
}

}  // namespace

namespace {

// A given tensor as its file's header describes it.
struct GivenTensor {
  std::string name;
  DType dtype;
  Shape shape;
};

// For each of `wanted`, the index of the given tensor that holds it; the
// UserErrors match_named_weights documents. Needs no tensor data.
std::vector<size_t> match_given(const Model& m, const std::vector<ModelTensor>& wanted,
                                const std::vector<GivenTensor>& given, const std::string& source) {
  std::unordered_map<std::string, size_t> by_stored, by_unique_own;
  std::map<std::string, int> own_count;
  for (size_t k = 0; k < wanted.size(); ++k) {
    by_stored[wanted[k].stored] = k;
    ++own_count[wanted[k].own];
  }
  for (size_t k = 0; k < wanted.size(); ++k)
    if (own_count[wanted[k].own] == 1) by_unique_own[wanted[k].own] = k;
  auto lookup = [](const std::unordered_map<std::string, size_t>& map, const std::string& n, size_t* k) {
    auto it = map.find(n);
    if (it != map.end()) *k = it->second;
    return it != map.end();
  };

  constexpr size_t kNone = ~size_t{0};
  std::vector<size_t> held(wanted.size(), kNone);
  std::vector<std::string> extra;
  for (size_t i = 0; i < given.size(); ++i) {
    const std::string& n = given[i].name;
    if (ignored_weight(n)) continue;
    size_t k = 0;
    if (!lookup(by_stored, n, &k) && !lookup(by_unique_own, n, &k) && !lookup(by_unique_own, without_layer(n), &k)) {
      extra.push_back(n);
      continue;
    }
    if (held[k] != kNone && given[held[k]].name == n) throw UserError(cat(source, ": tensor '", n, "' is given twice"));
    if (held[k] != kNone)
      throw UserError(cat(source, ": tensors '", given[held[k]].name, "' and '", n, "' both hold the model's '",
                          wanted[k].stored, "'"));
    held[k] = i;
  }
  if (!extra.empty())
    throw UserError(cat(source, ": ", extra.size(), " tensor", extra.size() > 1 ? "s are" : " is", " not in ", m.name,
                        ": ", name_list(extra), " (weights of another model?)"));
  std::vector<std::string> missing;
  for (size_t k = 0; k < wanted.size(); ++k)
    if (held[k] == kNone) missing.push_back(wanted[k].stored);
  if (!missing.empty())
    throw UserError(cat(source, " lacks ", missing.size(), " of ", m.name, "'s ", wanted.size(), " tensors: ",
                        name_list(missing)));
  for (size_t k = 0; k < wanted.size(); ++k) {
    const GivenTensor& g = given[held[k]];
    if (g.dtype != DType::F32 || g.shape != wanted[k].shape)
      throw UserError(cat(source, ": tensor '", g.name, "' is ", shape_str(g.shape), " ", dtype_name(g.dtype), ", ",
                          m.name, "'s '", wanted[k].stored, "' is ", shape_str(wanted[k].shape), " ",
                          dtype_name(DType::F32)));
  }
  return held;
}

// A NaN or infinity in given weights would surface as a diverged loss,
// blamed on --lr.
void check_finite(const Tensor& t, const std::string& file, const std::string& name) {
  const float* x = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i)
    if (!std::isfinite(x[i]))
      throw UserError(cat(file, ": tensor '", name, "' holds ", x[i], " at element ", i,
                          "; weights must be finite numbers"));
}

}  // namespace

NamedTensors match_named_weights(const Model& m, const NamedTensors& given, const std::string& source) {
  const std::vector<ModelTensor> wanted = model_tensors(m);
  std::vector<GivenTensor> described;
  for (const auto& [n, t] : given) described.push_back({n, t.dtype(), t.shape()});
  const std::vector<size_t> held = match_given(m, wanted, described, source);
  NamedTensors out;
  out.reserve(wanted.size());
  for (size_t k = 0; k < wanted.size(); ++k) out.emplace_back(wanted[k].stored, given[held[k]].second);
  return out;
}

// Names and shapes are matched from the files' headers first; then only the
// matched tensors are read, so a file of other tensors costs no memory.
NamedTensors load_named_weights(const Model& m, const std::vector<std::string>& paths) {
  std::string source;
  const std::vector<std::string> files = weight_file_paths(paths, &source);
  std::vector<GivenTensor> given;
  std::vector<size_t> file_of;
  for (size_t f = 0; f < files.size(); ++f)
    for (SafetensorsEntry& e : read_safetensors_entries(files[f])) {
      given.push_back({std::move(e.name), e.dtype, std::move(e.shape)});
      file_of.push_back(f);
    }
  const std::vector<ModelTensor> wanted = model_tensors(m);
  const std::vector<size_t> held = match_given(m, wanted, given, source);
  std::vector<std::vector<std::string>> names(files.size());
  for (size_t i : held) names[file_of[i]].push_back(given[i].name);
  std::map<std::pair<size_t, std::string>, Tensor> read;
  for (size_t f = 0; f < files.size(); ++f)
    if (!names[f].empty())
      for (auto& [n, t] : load_safetensors_named(files[f], names[f])) read[{f, n}] = std::move(t);
  NamedTensors out;
  out.reserve(wanted.size());
  for (size_t k = 0; k < wanted.size(); ++k) {
    const size_t i = held[k];
    const Tensor& t = read.at({file_of[i], given[i].name});
    check_finite(t, files[file_of[i]], given[i].name);
    out.emplace_back(wanted[k].stored, t);
  }
  return out;
}

}  // namespace pd
