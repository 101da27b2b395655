// Training checkpoints: everything a resumed run needs to continue bit-identically — fp32 master
// weights, Adam moments, the optimizer's step count and the next training step (the data position
// follows from it: rows are consumed in a fixed order). Layout of DIR:
//   weights.safetensors    fp32 master values in quill's internal layout, by parameter name
//   optimizer.safetensors  "exp_avg.<name>" and "exp_avg_sq.<name>" for each trainable parameter
//   state.json             {"next_step", "optimizer_steps", "format": "quill-train-checkpoint-v1"}
// A checkpoint is written to DIR.tmp-<pid> and swapped in only when complete.
#pragma once

#include <cstdint>
#include <string>

#include "model/params.h"
#include "ops/device_context.h"
#include "optim/adamw.h"

namespace quill {

void save_train_checkpoint(const std::string& dir, int64_t next_step, const ParamTable& params, AdamW& optimizer,
                           const DeviceContext& ctx);
// Loads into params and optimizer; returns the next step to run. Throws naming the file and tensor
// when the checkpoint does not match the model.
int64_t load_train_checkpoint(const std::string& dir, ParamTable& params, AdamW& optimizer, const DeviceContext& ctx);

}  // namespace quill
