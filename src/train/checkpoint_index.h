// Reading a training checkpoint's files (train/train_checkpoint.h has the format): state.json, and
// which shard file holds which element range of which tensor. Kept apart from the resume so that
// anything that reads a checkpoint (the resume, `quill export`, tests) is pointed at one directory —
// the one holding state.json — and reads it one way.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace quill {

inline constexpr const char* kTrainCheckpointFormat = "quill-train-checkpoint-v4";
// The format before state.json carried the config, the rows and the hashes: still resumed, unchecked.
inline constexpr const char* kUncheckedTrainCheckpointFormat = "quill-train-checkpoint-v3";

// "shard-rank{rank}-of-{size}.safetensors".
std::string train_shard_file(int rank, int size);

// DIR/state.json, parsed; throws naming the file when it is missing, not JSON, or not of a format above.
nlohmann::json read_train_state(const std::string& dir);

// One saved piece of a tensor kind of one parameter ("master/NAME", "exp_avg/NAME", "fixed/NAME", ...):
// elements [begin, end) of the whole parameter, flattened, in files[file] under the name `tensor`.
struct SavedPiece {
  int64_t begin, end;
  size_t file;
  std::string tensor;
};

// Every rank's file (mapped; nothing read until asked), and which of them holds which range of which
// tensor ("kind/name" -> pieces, in file order).
struct SavedIndex {
  std::vector<SafetensorsFile> files;
  std::map<std::string, std::vector<SavedPiece>> pieces;
};
// Throws naming the file when one is missing or holds a tensor that is not a piece.
SavedIndex read_saved_index(const std::string& dir, int saved_world);

}  // namespace quill
