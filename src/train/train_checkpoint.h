// Training checkpoints: everything a resumed run needs to continue bit-identically — fp32 master
// weights, Adam moments, the optimizer's step count and the next training step (the data position
// follows from it: rows are consumed in a fixed order; training draws no random numbers).
//
// Keyed by parameter name and global element range, so that a run can resume under another layout
// (each rank reads the ranges of its new shards and slices from whichever files hold them):
//   shard-rank{r}-of-{W}.safetensors  world rank r's pieces: "master/NAME/B-E", "exp_avg/NAME/B-E",
//                                     "exp_avg_sq/NAME/B-E" (elements [B, E) of the whole NAME
//                                     flattened; each element in one rank's file; masters F32, moments
//                                     in their dtype, F32 or BF16, so that bf16 moments resume bit for
//                                     bit), and "fixed/NAME/B-E" (F32) for frozen tensors and buffers.
//                                     CPU offload changes nothing here: the host part's pieces are
//                                     written and read like the device's (cut at the boundary).
//   state.json                        {"format", "next_step", "optimizer_steps", "world_size", "layout",
//                                      "config", "rows_sha256", "shards", "sha256"}: what the checkpoint
//                                      must match and the hashes that prove its bytes
//                                      (train/checkpoint_identity.h)
// Written to DIR.tmp-<pid of rank 0> by every rank and swapped in by rank 0 only when complete. Each
// rank hashes its shard while its threads write it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "model/params.h"
#include "ops/device_context.h"
#include "optim/adamw.h"
#include "parallel/layout.h"
#include "train/checkpoint_identity.h"

namespace quill {

// This rank's share of a checkpoint in host memory, taken at a step boundary, to be written into
// `tmp` (every rank's shard there) and then sealed and swapped in as `dir`.
struct CheckpointSnapshot {
  std::string dir, tmp;
  int64_t next_step = 0, optimizer_steps = 0;
  int rank = 0, world_size = 1;
  LayoutSpec layout;
  std::vector<std::pair<std::string, Tensor>> pieces;  // "kind/NAME/B-E" -> values
  std::map<std::string, std::string> shapes;           // "shape:NAME" -> the whole tensor's shape
  int64_t bytes = 0;                                   // of this rank's pieces
  std::string sha256;                                  // of this rank's shard file, once written
};

// Collective (every rank; the temporary directory is named after rank 0's pid and made by it). With
// own_copy every piece is copied into host memory of its own, so that training may go on changing the
// state while the copy is written (--async-save); without, pieces already in host memory are views.
CheckpointSnapshot snapshot_train_checkpoint(const std::string& dir, int64_t next_step, const ParamTable& params,
                                             const AdamW& optimizer, const DeviceContext& ctx, const Layout& layout,
                                             bool own_copy);
// This rank's shard file into snapshot.tmp, hashed as it is written. No collective and no device
// work, so that a background thread may run it. show_progress: a progress line of its bytes.
void write_snapshot_shard(CheckpointSnapshot& snapshot, bool show_progress);
// Collective, once every rank wrote its shard: rank 0 gathers the hashes, writes state.json and swaps
// the directory in as snapshot.dir (io/dir_swap.h): a kill at any moment leaves a complete checkpoint
// that a resume finds.
void seal_train_checkpoint(const CheckpointSnapshot& snapshot, const CheckpointIdentity& identity, Comm* world,
                           const DeviceContext& ctx);

// The three above in a row. show_progress (the lead, not --quiet): a progress line on stderr of this
// rank's share when the save takes more than a few seconds (every rank's share is about as large).
void save_train_checkpoint(const std::string& dir, int64_t next_step, const CheckpointIdentity& identity,
                           const ParamTable& params, const AdamW& optimizer, const DeviceContext& ctx,
                           const Layout& layout, bool show_progress = false);
// Loads into params and optimizer under any layout of the same model. Returns the next step.
// Throws naming the key, file or tensor when the checkpoint does not match the run (`identity`) or
// its bytes are not the ones written (checkpoint_identity.h), before any weight is read.
int64_t load_train_checkpoint(const std::string& dir, const CheckpointIdentity& identity, const CheckpointChecks& checks,
                              ParamTable& params, AdamW& optimizer, const DeviceContext& ctx, const Layout& layout,
                              bool show_progress = false);

// The fp32 values a checkpoint holds, whole, by name (the master and fixed pieces of every rank
// assembled), flattened: for tests and tools that compare runs through the fp32 state. `dir` is a
// checkpoint, or a --save directory of iterations (then its latest: train/checkpoint_history.h).
std::vector<std::pair<std::string, Tensor>> checkpoint_values(const std::string& dir);

}  // namespace quill
