#pragma once
// Weights saved in several files, in Hugging Face's sharded layout: one
// safetensors file per pipeline stage, NAME-0000S-of-0000N.safetensors,
// written by that stage's leader, and NAME.safetensors.index.json mapping
// each tensor name to its file ({"metadata": {"total_size": bytes},
// "weight_map": {name: file}}). No process gathers another stage's tensors.
//
// `--save PATH` writes
//  - PATH itself, one file, for `train` and for a run whose whole model
//    holds at most kSingleFileSaveBytes of weights (the model is small);
//  - shards and PATH.index.json (PATH ending in .safetensors) when a run of
//    several stages saves a larger model, or whenever PATH names an index
//    (ends in .safetensors.index.json).
// Every reader of weight files (--init, evaluate, predict, export) takes
// the index, or PATH when only PATH.index.json exists.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace pd {

constexpr const char* kWeightIndexSuffix = ".safetensors.index.json";
// Above this many bytes of weights, a run of several stages saves shards.
constexpr uint64_t kSingleFileSaveBytes = uint64_t{1} << 30;

bool is_weight_index(const std::string& path);
// Whether `--save save` of a model of `model_bytes` run in `stages` stages
// writes shards and an index.
bool save_is_sharded(const std::string& save, int stages, uint64_t model_bytes);
// The index a sharded save writes: save itself, or save + ".index.json".
std::string weight_index_path(const std::string& save);
// Shard `shard` (from 0) of `shards`: DIR/NAME-00001-of-00004.safetensors.
std::string weight_shard_path(const std::string& index, int shard, int shards);
// Writes the index (atomically): tensor name -> shard file path (stored as
// its file name, relative to the index's folder).
void write_weight_index(const std::string& index, const std::map<std::string, std::string>& file_of_tensor,
                        uint64_t total_bytes);
// The shard files an index names, in order, as paths. UserError naming the
// index when it is malformed, names a file outside its folder or a file
// that is missing.
std::vector<std::string> weight_index_files(const std::string& index);
// `path`, or its index when `path` does not exist but path.index.json does.
std::string resolve_weight_path(const std::string& path);

}  // namespace pd
