// Training checkpoints: everything a resumed run needs to continue bit-identically — fp32 master
// weights, Adam moments, the optimizer's step count and the next training step (the data position
// follows from it: rows are consumed in a fixed order; training draws no random numbers). Layout:
//   weights.safetensors                 fp32 master values, quill's internal layout, by name (rank 0)
//   optimizer-rank{r}-of-{D}.safetensors  "exp_avg", "exp_avg_sq": rank r's shard of the flat
//                                        moments (ZeRO-1), with its [begin, end) in the metadata
//   state.json                          {"format", "next_step", "optimizer_steps", "dp_size"}
// Written to DIR.tmp-<pid of rank 0> by every rank and swapped in by rank 0 only when complete.
#pragma once

#include <cstdint>
#include <string>

#include "comm/comm.h"
#include "model/params.h"
#include "ops/device_context.h"
#include "optim/adamw.h"

namespace quill {

void save_train_checkpoint(const std::string& dir, int64_t next_step, const ParamTable& params, AdamW& optimizer,
                           const DeviceContext& ctx, Comm* dp = nullptr);
// Loads into params and optimizer (same data-parallel size as saved); returns the next step.
// Throws naming the file and tensor when the checkpoint does not match the run.
int64_t load_train_checkpoint(const std::string& dir, ParamTable& params, AdamW& optimizer, const DeviceContext& ctx,
                              Comm* dp = nullptr);

}  // namespace quill
