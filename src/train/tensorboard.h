// `quill train --tensorboard-dir DIR` (Megatron's flag): the lead rank writes one TensorBoard event file,
// DIR/events.out.tfevents.<unix seconds>.<hostname>, with each step's scalars under Megatron-like tags,
// flushed after every step so that a running TensorBoard shows the run as it trains. The format is
// train/tensorboard_events.h; what the scalars mean is docs/run-directory.md.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/append_file.h"
#include "train/tensorboard_events.h"
#include "train/trainer.h"

namespace quill {

// Lead rank, before anything is written: refuses (naming the flag) a DIR that is not a directory, or
// in which (or, when missing, in whose nearest existing ancestor) no file can be created
// (base/writable_dir.h). Leaves nothing behind: DIR itself is created by TensorBoardLog, after --out is
// prepared.
void check_tensorboard_dir(const std::string& dir);

// What the scalars of a step need to know about the run.
struct TensorBoardRun {
  std::vector<int64_t> moe_layers;  // the model's layer index of each StepMetrics::expert_tokens entry
  int64_t active_params = 0;        // N of the MFU formula (TrainResult::active_params)
  int world_size = 1;               // the layout's GPUs (TrainResult::world_size)
  bool simulated = false;           // --simulate-rank: no MFU (one rank's time is not the job's)
};

// One step's scalars, in this order: "lm loss", "learning rate", "grad norm", "tokens/s", "step time (s)",
// "lm loss validation" (an evaluation step: StepMetrics::valid_loss), "peak memory (GiB)" (with a probe), "mfu" (a real run), then per MoE layer L "expert load/max over
// mean/layer L" and "expert load/idle experts/layer L" (experts that received no token this step).
std::vector<TensorBoardScalar> step_scalars(const StepMetrics& m, const TensorBoardRun& run);

class TensorBoardLog {
 public:
  // Creates DIR when missing and a new event file in it, opened by the file_version event.
  TensorBoardLog(const std::string& dir, TensorBoardRun run);

  // Appends the step's scalars as one event and flushes it; a failed write throws naming the file.
  void append(const StepMetrics& m);
  const std::string& path() const { return path_; }

 private:
  void write(const std::string& event);

  TensorBoardRun run_;
  std::string path_;
  std::unique_ptr<AppendFile> file_;  // made once the path is known
};

}  // namespace quill
