// safetensors: u64 little-endian header size N, N bytes of JSON, then the
// tensors' raw bytes. Every offset in the header is checked on load, so a
// truncated or corrupted file is a UserError, never a crash.
#include "core/safetensors.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/error.h"

namespace pd {

namespace {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::F32;
  else if (s == "I32") *out = DType::I32;
  else if (s == "I64") *out = DType::I64;
  else return false;
  return true;
}

// Largest header we accept (the format's own limit is 100 MB).
constexpr uint64_t kMaxHeader = 100'000'000;

}  // namespace

void save_safetensors(const std::string& path, const NamedTensors& tensors,
                      const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    PD_CHECK(t.defined(), "tensor '", name, "' is undefined");
    if (header.contains(name)) throw UserError(cat("duplicate tensor name '", name, "' in ", path));
    uint64_t end = offset + t.nbytes();
    header[name] = {{"dtype", st_dtype(t.dtype())}, {"shape", t.shape()}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // keeps the data 8-byte aligned

  const std::string tmp = cat(path, ".tmp.", ::getpid());
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) throw UserError(cat("cannot write ", path, ": ", std::strerror(errno)));
  bool ok = true;
  uint64_t n = text.size();
  ok = ok && std::fwrite(&n, 8, 1, f) == 1;
  ok = ok && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const auto& [name, t] : tensors) {
    Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
    if (h.nbytes()) ok = ok && std::fwrite(h.raw(), 1, h.nbytes(), f) == h.nbytes();
  }
  ok = ok && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  ok = (std::fclose(f) == 0) && ok;
  if (!ok || std::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    std::remove(tmp.c_str());
    throw RuntimeFailure(cat("writing ", path, " failed: ", std::strerror(err)));
  }
}

NamedTensors load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(cat("cannot open safetensors file ", path));
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  auto bad = [&](const std::string& why) { return UserError(cat(path, " is not a valid safetensors file: ", why)); };
  if (file_size < 8) throw bad("shorter than the 8-byte header length");
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  if (header_len > kMaxHeader || header_len > file_size - 8)
    throw bad(cat("header length ", header_len, " exceeds the file size ", file_size));
  std::string text(header_len, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_len));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw bad(cat("header is not JSON (", e.what(), ")"));
  }
  if (!header.is_object()) throw bad("header is not a JSON object");
  const uint64_t data_size = file_size - 8 - header_len;

  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) throw bad("__metadata__ is not an object");
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) throw bad(cat("metadata value '", m.key(), "' is not a string"));
        if (metadata) (*metadata)[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    try {
      Entry e{name, DType::F32, {}, 0, 0};
      if (!parse_dtype(v.at("dtype").get<std::string>(), &e.dtype))
        throw bad(cat("tensor '", name, "' has unsupported dtype ", v.at("dtype").dump()));
      for (const auto& d : v.at("shape")) {
        int64_t k = d.get<int64_t>();
        if (k < 0) throw bad(cat("tensor '", name, "' has a negative dimension"));
        e.shape.push_back(k);
      }
      const auto& off = v.at("data_offsets");
      if (!off.is_array() || off.size() != 2) throw bad(cat("tensor '", name, "' data_offsets is not [begin, end]"));
      e.begin = off[0].get<uint64_t>();
      e.end = off[1].get<uint64_t>();
      if (e.begin > e.end || e.end > data_size)
        throw bad(cat("tensor '", name, "' data [", e.begin, ", ", e.end, ") lies outside the ", data_size,
                      " data bytes"));
      if (e.end - e.begin != static_cast<uint64_t>(shape_numel(e.shape)) * dtype_size(e.dtype))
        throw bad(cat("tensor '", name, "' has ", e.end - e.begin, " bytes but shape ", shape_str(e.shape)));
      entries.push_back(std::move(e));
    } catch (const nlohmann::json::exception& ex) {
      throw bad(cat("tensor '", name, "' entry is malformed (", ex.what(), ")"));
    }
  }
  // The file order (by offset) is the order the tensors were saved in.
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  NamedTensors out;
  const uint64_t base = 8 + header_len;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    in.seekg(static_cast<std::streamoff>(base + e.begin));
    in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(e.end - e.begin));
    if (!in) throw bad(cat("could not read the data of tensor '", e.name, "'"));
    out.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace pd
