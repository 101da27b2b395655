// The up-front check of a rows directory before training: every token id inside the model's
// vocabulary, every mask byte 0 or 1, and (unless skipped) rows.bin hashing to the manifest's
// rows_sha256, so that a corrupt or mismatched file stops the run before step 0, naming the file,
// the row and the position, instead of failing (or silently training) inside a step.
//
// Cost: the range checks run on every core; SHA-256 is one sequential hash (rows_sha256 covers the
// rows in order, docs/rows-format.md), so it runs on its own thread beside them and bounds the time
// (docs/run-directory.md gives the measured cost on 1 GB).
#pragma once

#include <cstdint>
#include <string>

#include "data/rows.h"

namespace quill {

struct RowsCheckOptions {
  int64_t vocab_size = 0;        // token ids must be below this (the unpadded vocabulary)
  std::string vocab_note;        // the limit in words, for messages ("the model's vocabulary of 300")
  bool verify_sha256 = true;     // false: ranges only (--no-verify-rows)
  int threads = 0;               // <= 0: every core
};

// Throws naming rows.bin, the row and the position of the first bad value, or the manifest and both
// hashes; a rows directory with no rows is an error too (nothing to train on).
void check_rows_for_training(const RowsReader& rows, const RowsCheckOptions& options);

}  // namespace quill
