#include "core/layer.h"

#include <cmath>

namespace pd {

float CounterRng::normal(uint64_t i) const {
  Philox4 r = block(i / 2);
  int k = static_cast<int>(i % 2) * 2;
  // Map to (0, 1] so log() is finite.
  float u1 = (static_cast<float>(r.v[k] >> 8) + 1.0f) * (1.0f / 16777216.0f);
  float u2 = uniform01(r.v[k + 1]);
  return std::sqrt(-2.0f * std::log(u1)) * std::cos(6.28318530717958647692f * u2);
}

size_t LayerContext::saved_bytes() const {
  size_t n = 0;
  for (const Tensor& t : saved) n += t.defined() ? t.nbytes() : 0;
  for (const LayerContext& c : children) n += c.saved_bytes();
  return n;
}

bool LayerContext::keeps(const Tensor& t) const {
  for (const Tensor& s : saved)
    if (s.defined() && s.same_storage(t)) return true;
  for (const LayerContext& c : children)
    if (c.keeps(t)) return true;
  return false;
}

void Layer::init(std::span<Tensor> params, std::span<Tensor> buffers, const CounterRng&) const {
  for (Tensor& p : params) p.zero();
  for (Tensor& b : buffers) b.zero();
}

std::vector<Tensor> allocate_params(const Layer& l, Device d) {
  std::vector<Tensor> out;
  for (const ParamSpec& s : l.param_specs()) out.push_back(Tensor::zeros(s.shape, DType::F32, d));
  return out;
}

std::vector<Tensor> allocate_buffers(const Layer& l, Device d) {
  std::vector<Tensor> out;
  for (const ParamSpec& s : l.buffer_specs()) out.push_back(Tensor::zeros(s.shape, DType::F32, d));
  return out;
}

}  // namespace pd
