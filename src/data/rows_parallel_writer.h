// rows.bin written in any order (the data build's writer; RowsWriter streams one row at a time).
// A row's place in the token section is known from its index, so each run of rows is written
// there directly (pwrite); the mask section's place depends on the final row count, so masks go
// to a second temporary file at their row's offset and close_file() copies them behind the
// tokens (copy_file_range). The caller computes rows_sha256 and the other summary fields (it holds
// the rows in order); the file and the manifest are byte for byte what RowsWriter writes for the
// same rows. Destroyed unfinished, it removes its temporaries and leaves out_dir as it was.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "data/build_timing.h"
#include "data/rows.h"

namespace quill {

class ParallelRowsWriter {
 public:
  ParallelRowsWriter(const std::string& out_dir, int64_t row_tokens);
  ~ParallelRowsWriter();
  ParallelRowsWriter(const ParallelRowsWriter&) = delete;
  ParallelRowsWriter& operator=(const ParallelRowsWriter&) = delete;

  // Rows first .. first + count - 1: count * T token ids and count * T mask bytes. Thread-safe
  // for distinct rows (but a file takes buffered writes one at a time); every row
  // 0 .. rows - 1 must be written once before close_file().
  void write(int64_t first, int64_t count, const uint32_t* tokens, const uint8_t* mask);
  // Asks the kernel to start writing those rows to the disk now, without waiting, so that
  // close_file()'s fsync has less left to do. Only a hint.
  void start_writeback(int64_t first, int64_t count);

  // Finishing, in two steps: close_file() copies the masks of rows 0 .. rows - 1 behind the
  // tokens, writes the header and fsyncs (`timing`, may be null, gets both as phases); install()
  // renames the file into place and writes the manifest (rows_manifest(extras, summary)), which
  // it returns.
  void close_file(int64_t rows, BuildTiming* timing);
  nlohmann::json install(const RowsSummary& summary, const nlohmann::json& extras);

  int64_t row_tokens() const { return row_tokens_; }

 private:
  void copy_masks(uint64_t bytes, uint64_t offset);

  std::string dir_, tokens_tmp_, mask_tmp_;
  int64_t row_tokens_;
  int tokens_fd_ = -1, mask_fd_ = -1;
  int64_t rows_ = -1;  // set by close_file()
  bool finished_ = false;
};

}  // namespace quill
