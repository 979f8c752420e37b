#include "models/parameters.h"

#include <unordered_map>

#include "core/error.h"

namespace pd {

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
      s.params_.push_back(d.is_cpu() ? p[k] : p[k].to(d));
      s.param_names_.push_back(stored_tensor_name(i, ps[k].name));
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
  for (size_t i = 0; i < params_.size(); ++i) out.emplace_back(param_names_[i], params_[i]);
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
  fill(param_names_, params_);
  fill(buffer_names_, buffers_);
}

}  // namespace pd
