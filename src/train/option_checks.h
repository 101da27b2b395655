// Every option of a training run checked before anything is read, allocated or written, so that a
// bad flag costs no time and leaves no files: one message naming the flag and the allowed range.
#pragma once

#include <string>
#include <vector>

#include "model/params.h"
#include "train/train_options.h"

namespace quill {

// The numerics (schedule, AdamW, clipping), the run's length and outputs. Ranges follow
// torch.optim.AdamW's own checks (0 <= lr, 0 <= eps, 0 <= beta < 1, 0 <= weight_decay) and Megatron's
// OptimizerParamScheduler (min_lr <= max_lr, warm-up shorter than the decay).
void check_train_options(const TrainOptions& options);
// --init DIR (when given) is a Hugging Face checkpoint directory: it exists, is a directory, holds
// model.safetensors or its index, and config.json unless --config gives the model. The message names
// --init and the missing file. Called before the config is read (resolve_config).
void check_init_dir(const TrainOptions& options);
// Each --freeze pattern must match at least one parameter of the model (a typo would otherwise train
// what the user meant to freeze).
void check_freeze_patterns(const ParamTable& params, const std::vector<std::string>& patterns);

}  // namespace quill
