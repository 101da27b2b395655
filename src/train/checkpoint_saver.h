// The checkpoints of one run into its --save DIR (train/checkpoint_history.h): each as DIR/iter_NNNNNNN,
// then the latest file, then the retention (--keep-last-checkpoints), and a closing line per save
// (bytes, time, MB/s).
//
// --async-save (Megatron's flag): at the step boundary every rank copies its share of the state into
// host memory of its own (counted in the save's line); a background thread writes the shard file while
// training goes on. At each later step boundary the ranks ask together (one 8-byte all-reduce while a
// save is in flight) whether every shard is written; when so, they seal it (hashes, state.json, the
// swap) and only then is the latest file rewritten. Never two saves at once: a save that finds the
// previous one still writing waits for it, and says so. A kill while it writes leaves a temporary
// directory that the next run removes, and the latest file naming the previous checkpoint.
#pragma once

#include <atomic>
#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <thread>

#include "train/checkpoint_identity.h"
#include "train/train_checkpoint.h"

namespace quill {

struct SaverSettings {
  std::string root;             // --save DIR
  int64_t keep_last = 0;        // --keep-last-checkpoints N (0: keep all)
  bool async = false;           // --async-save
  double test_write_delay_s = 0;  // tests only: the writer sleeps this long before it writes
  bool lead = true;             // world rank 0: the latest file, the retention and the log lines
  bool quiet = false;           // no progress or closing lines
  std::string command = "quill train";  // what its lines start with
};

class CheckpointSaver {
 public:
  CheckpointSaver(SaverSettings settings, CheckpointIdentity identity, const ParamTable& params,
                  const AdamW& optimizer, const DeviceContext& ctx, const Layout& layout);
  // Joins a writer still running (the run failed): its checkpoint is left unnamed, and the next run
  // removes its temporary directory.
  ~CheckpointSaver();
  CheckpointSaver(const CheckpointSaver&) = delete;
  CheckpointSaver& operator=(const CheckpointSaver&) = delete;

  // Collective. The state after `next_step` steps as DIR/iter_NNNNNNN: written now, or with --async-save
  // copied now and written in the background (after waiting for a save still being written).
  void save(int64_t next_step);
  // Collective, at every step boundary: finishes a background save once every rank wrote its shard.
  void poll();
  // Collective: waits for a save in flight and finishes it (the run's end, a stop signal).
  void wait();
  // The newest iteration this run named in the latest file (-1: none yet).
  int64_t latest() const { return latest_; }

 private:
  void start_writer();
  void finish();  // seals, names it latest, retires old ones, prints the line

  SaverSettings settings_;
  CheckpointIdentity identity_;
  const ParamTable& params_;
  const AdamW& optimizer_;
  const DeviceContext& ctx_;
  const Layout& layout_;
  std::optional<CheckpointSnapshot> pending_;
  std::thread writer_;
  std::atomic<bool> written_{false};
  std::exception_ptr error_;
  double copy_s_ = 0, write_s_ = 0;  // of the pending save: its snapshot, and its shard's writing
  int64_t latest_ = -1;
};

}  // namespace quill
