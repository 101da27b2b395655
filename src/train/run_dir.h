// The run directory (--out) and checkpoint directory (--save) of a training run: what may already be
// there when a run starts, what a killed earlier run left, and what a failed run leaves behind.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "train/train_options.h"

namespace quill {

// Read-only, every rank, before anything is loaded: a non-empty --out is refused unless --load
// points into it or --overwrite is given, and so is a non-empty --save DIR outside --out unless it is
// the checkpoint being resumed. The message names the directory and both ways on.
void check_run_dir(const TrainOptions& options);

// The lead rank, before anything is loaded or written, once every rank has passed check_run_dir: --out,
// --save and --tensorboard-dir each point where this run can create files (a probe file is made and
// removed), so that a run that could not save its checkpoint stops now, not after training. --save is
// checked itself (its checkpoints are written inside it: train/checkpoint_history.h). Names the flag.
void check_outputs_writable(const TrainOptions& options);

// Rank 0, before loading --load DIR: when a kill interrupted DIR's swap (io/dir_swap.h), puts the
// newest complete copy back as DIR, and removes the side directories killed runs left. Returns a
// note for each thing it did.
std::vector<std::string> recover_checkpoint(const std::string& dir);

struct PreparedRunDir {
  bool created_out = false;         // --out did not exist before this run
  std::vector<std::string> notes;   // what was recovered or removed, one log line each
};

// Rank 0, right before the first write: recovers interrupted swaps of the checkpoint and of OUT/hf,
// removes the side directories killed runs left (a leak the size of the model), with --overwrite
// removes the earlier run's outputs (the files quill train and quill run write, and --save DIR), and
// creates --out.
PreparedRunDir prepare_run_dir(const TrainOptions& options);

// Rank 0, when the run fails: removes this run's unfinished side directories (after recovering an
// interrupted swap) and, when no step was recorded, the files this run made (--out itself when it
// created it), so that a failed start leaves nothing behind. A run that recorded steps keeps its
// metrics: they show what happened.
void clean_failed_run(const TrainOptions& options, const PreparedRunDir& prepared, int64_t steps_recorded);

}  // namespace quill
