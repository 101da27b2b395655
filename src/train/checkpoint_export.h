// `quill export`: a Hugging Face checkpoint made from a training checkpoint, on any number of ranks
// whatever layout trained it. The checkpoint is opened and checked first (train/checkpoint_weights.h:
// its model, state.json's and every shard's SHA-256, every tensor covered once); then its weight
// pieces are dealt to the ranks in order, in shares of about equal bytes, and each rank reads its
// pieces (a bounded buffer at a time) and writes them into the export's files
// (io/streamed_hf_writer.h). The files equal the in-run export's (`quill train --save-hf`) of the same
// weights with the same form, dtype and sources (--init, --config), whatever the two layouts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "comm/comm.h"
#include "io/hf_export.h"
#include "ops/device_context.h"
#include "train/checkpoint_identity.h"

namespace quill {

struct CheckpointExportRequest {
  // A run's --save DIR (the iteration its latest file names, or ckpt_step's, as --load chooses:
  // train/checkpoint_history.h) or one checkpoint directory (holding state.json).
  std::string checkpoint_dir;
  int64_t ckpt_step = -1;      // --ckpt-step N: that iteration of a --save DIR (-1: the latest)
  std::string out_dir;         // replaced when complete
  // As `quill train` takes them: --init's checkpoint (the release config, the pass-through tensors and
  // side files) and --config (the config the run was given: the model it names must be the
  // checkpoint's, and the transformers form carries its extra keys). Both may be empty.
  std::string init_dir, config_path;
  HfExportOptions options;
  CheckpointChecks checks;     // verify_bytes: --no-verify-checkpoint clears it
  bool show_progress = false;  // this rank's progress line
};

struct CheckpointExportResult {
  HfExportPlan plan;
  SaveReport report;
  int64_t next_step = 0;       // the step the checkpoint was saved before
  std::string checkpoint_dir;  // the checkpoint directory read (DIR/iter_NNNNNNN for a --save DIR)
};

// Collective over world (null: one process).
CheckpointExportResult export_train_checkpoint(const CheckpointExportRequest& request, Comm* world,
                                               const DeviceContext& ctx);

}  // namespace quill
