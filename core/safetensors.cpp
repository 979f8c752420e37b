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
#include <limits>
#include <set>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "core/atomic_file.h"
#include "core/checked.h"
#include "core/error.h"
#include "core/input_file.h"

namespace pd {

namespace {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::BF16: return "BF16";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::F32;
  else if (s == "I32") *out = DType::I32;
  else if (s == "I64") *out = DType::I64;
  else if (s == "BF16") *out = DType::BF16;
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

  write_file_atomically(path, [&](std::FILE* f) {
    const uint64_t n = text.size();
    bool ok = std::fwrite(&n, 8, 1, f) == 1 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
    for (const auto& [name, t] : tensors) {
      Tensor h = t.device().is_cpu() ? t : t.to(Device::cpu());
      if (h.nbytes()) ok = ok && std::fwrite(h.raw(), 1, h.nbytes(), f) == h.nbytes();
    }
    return ok;
  });
}

namespace {

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;
};

// The opened file and its parsed JSON header.
struct HeaderRead {
  std::ifstream in;
  nlohmann::json header;
  uint64_t header_len = 0, data_size = 0;
};

UserError invalid(const std::string& path, const std::string& why) {
  return UserError(cat(path, " is not a valid safetensors file: ", why));
}

HeaderRead read_header(const std::string& path) {
  // A folder or a device (/dev/zero) is refused before its "size" is read.
  checked_input_file(path, "the safetensors file", std::numeric_limits<uint64_t>::max());
  HeaderRead h{std::ifstream(path, std::ios::binary), {}, 0, 0};
  if (!h.in) throw UserError(cat("cannot open safetensors file ", path, ": ", std::strerror(errno)));
  h.in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(h.in.tellg());
  h.in.seekg(0);
  if (file_size < 8) throw invalid(path, "shorter than the 8-byte header length");
  h.in.read(reinterpret_cast<char*>(&h.header_len), 8);
  if (h.header_len > kMaxHeader || h.header_len > file_size - 8)
    throw invalid(path, cat("header length ", h.header_len, " exceeds the file size ", file_size));
  std::string text(h.header_len, '\0');
  h.in.read(text.data(), static_cast<std::streamsize>(h.header_len));
  check_json_depth(text, cat(path, ": header"));
  // JSON keeps the last of two equal keys; two tensors of one name would
  // load the second silently, so the parser is watched for them.
  std::set<std::string> names;
  auto refuse_duplicate_names = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    if (depth == 1 && event == nlohmann::json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second)
      throw invalid(path, cat("the header names tensor '", parsed.get<std::string>(), "' twice"));
    return true;
  };
  try {
    h.header = nlohmann::json::parse(text, refuse_duplicate_names);
  } catch (const nlohmann::json::exception& e) {
    throw invalid(path, cat("header is not JSON (", e.what(), ")"));
  }
  if (!h.header.is_object()) throw invalid(path, "header is not a JSON object");
  h.data_size = file_size - 8 - h.header_len;
  return h;
}

std::map<std::string, std::string> read_metadata(const nlohmann::json& v, const std::string& path) {
  if (!v.is_object()) throw invalid(path, "__metadata__ is not an object");
  std::map<std::string, std::string> out;
  for (auto m = v.begin(); m != v.end(); ++m) {
    if (!m.value().is_string()) throw invalid(path, cat("metadata value '", m.key(), "' is not a string"));
    out[m.key()] = m.value().get<std::string>();
  }
  return out;
}

// One tensor's header entry; its bytes lie inside the data and match its
// shape. Sizes are checked before they are multiplied, so no shape wraps.
Entry read_entry(const std::string& name, const nlohmann::json& v, uint64_t data_size, const std::string& path) {
  if (!v.is_object()) throw invalid(path, cat("tensor '", name, "' entry is not an object"));
  const std::string where = cat(path, ": tensor '", name, "'");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!v.contains(key)) throw invalid(path, cat("tensor '", name, "' has no ", key));
  Entry e{name, DType::F32, {}, 0, 0};
  if (!parse_dtype(checked::string(v["dtype"], {where, "dtype"}), &e.dtype))
    throw invalid(path, cat("tensor '", name, "' has unsupported dtype ", v["dtype"].dump()));
  const auto& shape = v["shape"];
  if (!shape.is_array()) throw invalid(path, cat("tensor '", name, "' shape is not an array"));
  int64_t numel = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    e.shape.push_back(checked::integer(shape[i], {where, cat("shape[", i, "]")}, 0, checked::kMaxCount));
    numel = checked::product(numel, e.shape.back(), {where, "shape"}, checked::kMaxCount);
  }
  const auto& off = v["data_offsets"];
  if (!off.is_array() || off.size() != 2) throw invalid(path, cat("tensor '", name, "' data_offsets is not [begin, end]"));
  const int64_t max = std::numeric_limits<int64_t>::max();
  e.begin = static_cast<uint64_t>(checked::integer(off[0], {where, "data_offsets[0]"}, 0, max));
  e.end = static_cast<uint64_t>(checked::integer(off[1], {where, "data_offsets[1]"}, 0, max));
  if (e.begin > e.end || e.end > data_size)
    throw invalid(path, cat("tensor '", name, "' data [", e.begin, ", ", e.end, ") lies outside the ", data_size,
                            " data bytes"));
  if (e.end - e.begin != static_cast<uint64_t>(numel) * dtype_size(e.dtype))
    throw invalid(path, cat("tensor '", name, "' has ", e.end - e.begin, " bytes but shape ", shape_str(e.shape)));
  return e;
}

// Sorted by offset; two tensors sharing bytes would alias each other's data.
void check_no_overlap(const std::vector<Entry>& sorted, const std::string& path) {
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i].begin < sorted[i - 1].end)
      throw invalid(path, cat("data_offsets of tensors '", sorted[i - 1].name, "' [", sorted[i - 1].begin, ", ",
                              sorted[i - 1].end, ") and '", sorted[i].name, "' [", sorted[i].begin, ", ",
                              sorted[i].end, ") overlap"));
}

// Every entry of the header, checked, sorted by offset (the order the
// tensors were saved in), and the metadata.
std::vector<Entry> read_entries(const HeaderRead& h, const std::string& path,
                                std::map<std::string, std::string>* metadata) {
  std::vector<Entry> entries;
  for (auto it = h.header.begin(); it != h.header.end(); ++it) {
    if (it.key() == "__metadata__") {
      for (auto& [key, value] : read_metadata(it.value(), path))
        if (metadata) (*metadata)[key] = value;
      continue;
    }
    entries.push_back(read_entry(it.key(), it.value(), h.data_size, path));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  check_no_overlap(entries, path);
  return entries;
}

}  // namespace

std::map<std::string, std::string> read_safetensors_metadata(const std::string& path) {
  std::map<std::string, std::string> metadata;
  read_entries(read_header(path), path, &metadata);
  return metadata;
}

namespace {

NamedTensors read_tensors(HeaderRead& h, const std::vector<Entry>& entries, const std::string& path) {
  NamedTensors out;
  std::ifstream& in = h.in;
  const uint64_t base = 8 + h.header_len;
  for (const Entry& e : entries) {
    Tensor t = Tensor::empty(e.shape, e.dtype);
    in.seekg(static_cast<std::streamoff>(base + e.begin));
    in.read(static_cast<char*>(t.raw()), static_cast<std::streamsize>(e.end - e.begin));
    if (!in) throw invalid(path, cat("could not read the data of tensor '", e.name, "'"));
    out.emplace_back(e.name, std::move(t));
  }
  return out;
}

}  // namespace

NamedTensors load_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  HeaderRead h = read_header(path);
  const std::vector<Entry> entries = read_entries(h, path, metadata);
  return read_tensors(h, entries, path);
}

std::vector<SafetensorsEntry> read_safetensors_entries(const std::string& path) {
  std::vector<SafetensorsEntry> out;
  for (const Entry& e : read_entries(read_header(path), path, nullptr)) out.push_back({e.name, e.dtype, e.shape});
  return out;
}

NamedTensors load_safetensors_named(const std::string& path, const std::vector<std::string>& names) {
  HeaderRead h = read_header(path);
  std::vector<Entry> entries = read_entries(h, path, nullptr);
  const std::set<std::string> wanted(names.begin(), names.end());
  std::erase_if(entries, [&](const Entry& e) { return !wanted.count(e.name); });
  return read_tensors(h, entries, path);
}

}  // namespace pd
