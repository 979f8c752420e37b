#include "runtime/gather.h"

#include <cstring>

#include <nlohmann/json.hpp>

#include "runtime/executor.h"

namespace pd {

void send_text(Transport& t, int to, const std::string& text) {
  // Bytes packed into I32 words; the length travels as meta.
  Tensor words = Tensor::zeros({static_cast<int64_t>((text.size() + 3) / 4 + 1)}, DType::I32);
  std::memcpy(words.raw(), text.data(), text.size());
  t.isend(words, to, gather_tag(t), static_cast<int64_t>(text.size())).wait();
}

std::string recv_text(Transport& t, int from) {
  Request r = t.irecv_any(from, gather_tag(t));
  r.wait();
  const Tensor words = r.tensor();
  return std::string(static_cast<const char*>(words.raw()), static_cast<size_t>(r.meta()));
}

void send_named_tensors(Transport& t, int to, const NamedTensors& tensors) {
  nlohmann::json names = nlohmann::json::array();
  for (const auto& [n, x] : tensors) names.push_back(n);
  send_text(t, to, names.dump());
  std::vector<Request> sends;
  for (const auto& [n, x] : tensors) sends.push_back(t.isend(x, to, gather_tag(t)));
  wait_all(sends);
}

NamedTensors recv_named_tensors(Transport& t, int from) {
  const nlohmann::json names = nlohmann::json::parse(recv_text(t, from));
  NamedTensors out;
  for (const auto& n : names) {
    Request r = t.irecv_any(from, gather_tag(t));
    r.wait();
    out.emplace_back(n.get<std::string>(), r.tensor());
  }
  return out;
}

}  // namespace pd
