// A training checkpoint's fp32 weights, checked and then read piece by piece: what `quill export`
// exports (train/checkpoint_export.h). Pointed at one checkpoint directory — the one holding
// state.json (train/train_checkpoint.h has the format) — so that whatever finds that directory
// (today `--save DIR` itself; a run's latest iteration directory later) hands it here.
//
// Opening checks, before any weight is read: the directory and its state.json exist and are a quill
// training checkpoint of the current format; the model (state.json's config) is the expected one when
// one is given (refused key by key, as a resume refuses it); state.json's own hash and every shard's
// SHA-256 (CheckpointChecks::verify_bytes; collective: each rank hashes a share of the files); every
// parameter of the model covered once by the saved pieces (the masters of trainable tensors, the
// "fixed" pieces of frozen tensors and buffers) and every piece one of the model's. Each refusal
// names the file, and the tensor where there is one.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "model/config.h"
#include "ops/device_context.h"
#include "train/checkpoint_identity.h"
#include "train/checkpoint_index.h"

namespace quill {

class CheckpointWeights {
 public:
  // expected_config: the model the caller expects (nullptr: state.json's own). Collective over world
  // (null: one process) when checks.verify_bytes.
  static CheckpointWeights open(const std::string& dir, const InklingConfig* expected_config,
                                const CheckpointChecks& checks, Comm* world, const DeviceContext& ctx);

  const std::string& dir() const { return dir_; }
  const InklingConfig& config() const { return config_; }
  int64_t next_step() const { return next_step_; }
  // The pieces holding parameter `name`, sorted by element range, covering it once.
  const std::vector<SavedPiece>& pieces(const std::string& name) const;
  // Elements [begin, begin + n) of the whole parameter, from one piece that holds them, into out
  // (pread: the files' pages are not mapped into this process).
  void read(const SavedPiece& piece, int64_t begin, int64_t n, float* out) const;

 private:
  std::string dir_;
  InklingConfig config_;
  int64_t next_step_ = 0;
  std::shared_ptr<SavedIndex> index_;
  std::map<std::string, std::vector<SavedPiece>> by_param_;
  std::shared_ptr<std::vector<int>> fds_;  // per file, opened on first read; closed with the last copy
};

}  // namespace quill
