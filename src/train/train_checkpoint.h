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
#include <string>
#include <utility>
#include <vector>

#include "model/params.h"
#include "ops/device_context.h"
#include "optim/adamw.h"
#include "parallel/layout.h"
#include "train/checkpoint_identity.h"

namespace quill {

// show_progress (the lead, not --quiet): a progress line on stderr of this rank's share when the save or
// load takes more than a few seconds (every rank's share is about as large).
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
// assembled), flattened: for tests and tools that compare runs through the fp32 state.
std::vector<std::pair<std::string, Tensor>> checkpoint_values(const std::string& dir);

}  // namespace quill
