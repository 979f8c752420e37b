#include "models/sharded_weights.h"

#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/input_file.h"

namespace pd {

namespace fs = std::filesystem;

bool is_weight_index(const std::string& path) {
  const std::string suffix = kWeightIndexSuffix;
  return path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool save_is_sharded(const std::string& save, int stages, uint64_t model_bytes) {
  return is_weight_index(save) || (stages > 1 && model_bytes > kSingleFileSaveBytes);
}

std::string weight_index_path(const std::string& save) {
  if (is_weight_index(save)) return save;
  const std::string ext = ".safetensors";
  const bool plain = save.size() > ext.size() && save.compare(save.size() - ext.size(), ext.size(), ext) == 0;
  return (plain ? save.substr(0, save.size() - ext.size()) : save) + kWeightIndexSuffix;
}

std::string weight_shard_path(const std::string& index, int shard, int shards) {
  const std::string stem = index.substr(0, index.size() - std::string(kWeightIndexSuffix).size());
  char tail[64];
  std::snprintf(tail, sizeof tail, "-%05d-of-%05d.safetensors", shard + 1, shards);
  return stem + tail;
}

void write_weight_index(const std::string& index, const std::map<std::string, std::string>& file_of_tensor,
                        uint64_t total_bytes) {
  nlohmann::json map = nlohmann::json::object();
  for (const auto& [name, file] : file_of_tensor) map[name] = fs::path(file).filename().string();
  const nlohmann::json j = {{"metadata", {{"total_size", total_bytes}, {"format", "pt"}}}, {"weight_map", map}};
  write_file_atomically(index, j.dump(2) + "\n");
}

std::vector<std::string> weight_index_files(const std::string& index) {
  const nlohmann::json j = read_json_file(index, "the weight index");
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object() || j["weight_map"].empty())
    throw UserError(cat(index, ": not a safetensors index (it needs a non-empty \"weight_map\" object)"));
  const fs::path folder = fs::path(index).parent_path();
  std::vector<std::string> files;
  std::set<std::string> seen;
  for (const auto& [name, file] : j["weight_map"].items()) {
    if (!file.is_string())
      throw UserError(cat(index, ": tensor '", name, "' maps to ", file.dump(), ", not a file name"));
    const std::string f = file.get<std::string>();
    const fs::path p(f);
    if (f.empty() || p.is_absolute() || p.has_parent_path() || f == "." || f == "..")
      throw UserError(cat(index, ": tensor '", name, "' maps to '", f, "', not a file name in the index's folder"));
    if (!seen.insert(f).second) continue;
    const std::string path = (folder / p).string();
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw UserError(cat(index, ": tensor '", name, "' is in '", f, "', which is missing (", path, ")"));
    files.push_back(path);
  }
  return files;
}

std::string resolve_weight_path(const std::string& path) {
  std::error_code ec;
  if (!is_weight_index(path) && !fs::exists(path, ec) && fs::exists(weight_index_path(path), ec))
    return weight_index_path(path);
  return path;
}

}  // namespace pd
