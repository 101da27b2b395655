// A Hugging Face checkpoint directory: one `model.safetensors`, or shards listed by
// `model.safetensors.index.json` ({"metadata": {"total_size": bytes}, "weight_map": {name: file}}).
// Like transformers, a `model.safetensors` wins when both exist.
//
// Reading opens (maps) a shard the first time one of its tensors is asked for. Writing splits the
// tensors, in order, into shards of at most `max_shard_bytes` tensor bytes (a larger tensor gets a
// shard of its own), named `model-00001-of-0000K.safetensors`, plus the index; one
// `model.safetensors` and no index when everything fits one shard. Every file is written under a
// temporary name and all are renamed only once every one succeeded.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace quill {

class CheckpointDir {
 public:
  static constexpr const char* kSingleFile = "model.safetensors";
  static constexpr const char* kIndexFile = "model.safetensors.index.json";

  // Reads the index (or the single file's header) and checks every listed shard exists; throws
  // naming the directory and file.
  static CheckpointDir open(const std::string& dir);
  // True when dir holds model.safetensors or model.safetensors.index.json.
  static bool is_checkpoint_dir(const std::string& dir);

  const std::string& dir() const { return state_->dir; }
  bool sharded() const { return state_->sharded; }
  // Every tensor name, sorted.
  const std::vector<std::string>& names() const { return state_->names; }
  bool contains(const std::string& name) const { return state_->weight_map.count(name) != 0; }
  // The shard file (relative to dir) holding `name`; throws "DIR: tensor NAME missing".
  const std::string& shard_of(const std::string& name) const;
  // metadata.total_size of the index; nullopt for a single file or an index without it.
  std::optional<uint64_t> index_total_size() const { return state_->total_size; }

  // The shard holding `name`, mapped on first use; throws "DIR: tensor NAME missing".
  const SafetensorsFile& file_of(const std::string& name) const;
  const SafetensorsEntry& entry(const std::string& name) const { return file_of(name).entry(name); }
  // Zero-copy read-only views (see SafetensorsFile).
  Tensor tensor(const std::string& name) const { return file_of(name).tensor(name); }
  Tensor raw(const std::string& name) const { return file_of(name).raw(name); }

 private:
  struct State {
    std::string dir;
    bool sharded = false;
    std::map<std::string, std::string> weight_map;  // name -> shard file
    std::vector<std::string> names;
    std::optional<uint64_t> total_size;
    std::mutex mutex;  // guards `files`
    std::map<std::string, std::unique_ptr<SafetensorsFile>> files;
  };
  std::shared_ptr<State> state_;
};

struct CheckpointWriteOptions {
  uint64_t max_shard_bytes = 5'000'000'000;  // transformers' save_pretrained default ("5GB")
  std::map<std::string, std::string> metadata = {{"format", "pt"}};  // each file's __metadata__
};

// How `items` split into shard files: greedy in order, as transformers' shard splitting does. The
// same items give the same split, whoever computes it (the streamed export: every rank alike).
struct CheckpointShards {
  std::vector<std::string> files;           // relative names, shard order
  std::vector<std::vector<size_t>> items;   // per file: indices into the items, in order
  uint64_t total_bytes = 0;                 // tensor bytes of all files
  bool sharded() const { return files.size() > 1; }
};
CheckpointShards plan_checkpoint_shards(const std::vector<SafetensorsItem>& items, uint64_t max_shard_bytes);
// model.safetensors.index.json's text for a sharded split (metadata.total_size, weight_map).
std::string checkpoint_index_json(const CheckpointShards& shards, const std::vector<SafetensorsItem>& items);

// Writes `items` as a checkpoint into dir (created if needed). Returns the files written (relative
// names, index last). A stale model.safetensors / index of the other layout is removed afterwards, so
// the directory reads back as what was written.
std::vector<std::string> write_checkpoint_dir(const std::string& dir, const std::vector<SafetensorsItem>& items,
                                              const CheckpointWriteOptions& options = {});

}  // namespace quill
