// A --save DIR as Megatron keeps it: one directory per checkpoint, DIR/iter_NNNNNNN (seven digits, the
// steps completed), and DIR/latest_checkpointed_iteration.txt naming the newest complete one. Each
// iter directory is a whole training checkpoint (train/train_checkpoint.h), swapped into place
// complete (io/dir_swap.h); the latest file is rewritten only after that (temp, fsync, rename), so a
// kill at any moment leaves it naming a complete checkpoint. Older ones are removed only after the new
// one is named (--keep-last-checkpoints), never the one the latest file names.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace quill {

inline constexpr const char* kLatestIterationFile = "latest_checkpointed_iteration.txt";

// "iter_0000042".
std::string iteration_dir_name(int64_t iteration);
// root/iter_NNNNNNN.
std::string iteration_dir(const std::string& root, int64_t iteration);

// The iteration root's latest file names; nothing when there is no such file. Throws naming the file
// when it holds anything but a non-negative integer.
std::optional<int64_t> latest_iteration(const std::string& root);
// Rewrites the latest file atomically (a temporary file, fsync, rename, fsync of the directory).
void write_latest_iteration(const std::string& root, int64_t iteration);

// The iterations of root's complete checkpoint directories (iter_NNNNNNN holding state.json), ascending.
std::vector<int64_t> saved_iterations(const std::string& root);

// What --load DIR (or --resume DIR) resumes from. `dir` is the checkpoint directory to read ("" when
// there is none and a fresh start was allowed); `iteration` its step (-1 for a checkpoint given
// directly); `note` a line for the log when it says something the user should see.
struct CheckpointChoice {
  std::string dir;
  int64_t iteration = -1;
  std::string note;
};

// Read-only. DIR holding the latest file: that iteration, or --ckpt-step's (`ckpt_step` >= 0), which
// must exist (refused naming it and the iterations there). DIR that is itself a checkpoint (state.json,
// the form before iteration directories): it, and --ckpt-step is refused. DIR with neither: refused,
// naming the flag that starts fresh, unless `start_fresh` (then `dir` is empty and `note` says so).
// `flag` is how the user named the option ("--load", "--resume").
CheckpointChoice choose_checkpoint(const std::string& load, int64_t ckpt_step, bool start_fresh, const std::string& flag);

// Rank 0, after `latest` was written: removes iteration directories so that `keep` remain, the one the
// latest file names always among them, the others the highest below it first (keep <= 0: none removed).
// Each is first renamed to a side name (so a kill mid-removal leaves no torn checkpoint under an
// iteration's name). Returns the directories removed.
std::vector<std::string> retire_checkpoints(const std::string& root, int64_t keep, int64_t latest);

// Rank 0, before the first load or save: for every iteration directory a killed save left mid-swap,
// puts the newest complete copy back, and removes the side directories of processes that no longer
// run. Returns a note for each thing done.
std::vector<std::string> tidy_checkpoint_history(const std::string& root);

}  // namespace quill
