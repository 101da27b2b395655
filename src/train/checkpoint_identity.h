// What a training checkpoint must match to be resumed, and proof that its bytes are the ones written.
// state.json carries the model's whole config (transformers' names, config_to_hf_json), the rows
// manifest's rows_sha256, the SHA-256 of every shard file, and "sha256": the SHA-256 of state.json's
// own content without that key (so next_step and the shard hashes are covered too). A resume compares
// them all before it reads a weight:
//   - another config is refused key by key ("written for num_hidden_layers 6, this run has 4"), always:
//     a checkpoint of another model is never resumed;
//   - other rows (another rows_sha256) are refused unless --no-verify-checkpoint-rows;
//   - a changed state.json or shard is refused naming it unless --no-verify-checkpoint.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "ops/device_context.h"

namespace quill {

struct CheckpointIdentity {
  std::string config_json;  // config_to_hf_json(config) of the run
  std::string rows_sha256;  // the rows manifest's rows_sha256
};

struct CheckpointChecks {
  bool verify_bytes = true;  // state.json's and every shard's SHA-256 (--no-verify-checkpoint skips)
  bool verify_rows = true;   // the same rows_sha256 (--no-verify-checkpoint-rows skips)
  const char* use = "resume"; // what is done with the checkpoint, in messages ("resume", "export")
};

// Adds "config", "rows_sha256", "shards" ({file: sha256}) and then "sha256" to a state.json object.
void seal_state(nlohmann::json& state, const CheckpointIdentity& identity, const nlohmann::json& shards);

// state.json (read from `state_path`) against the run: refuses another config or other rows, and a
// state.json whose "sha256" does not match its content; one message per refusal, naming the key.
void check_state(const std::string& state_path, const nlohmann::json& state, const CheckpointIdentity& identity,
                 const CheckpointChecks& checks);

// The config keys whose values differ, as "KEY SAVED, this run has MINE" phrases (empty: none).
std::vector<std::string> config_differences(const nlohmann::json& saved, const nlohmann::json& mine);

// Every rank hashes its share of the shard files (file i on rank i mod the world's size) against
// state.json's "shards"; the ranks agree, and every one throws naming the first file that differs.
// `use`: what is done with the checkpoint, in the message ("resume", "export").
void verify_shards(const std::string& dir, const nlohmann::json& state, Comm* world, int rank,
                   const DeviceContext& ctx, const char* use = "resume");

// Every rank's SHA-256 (hex), in rank order, on every rank (one all-reduce of 32 bytes per rank).
std::vector<std::string> gather_sha256(Comm* world, const DeviceContext& ctx, int rank, const std::string& hex);

}  // namespace quill
