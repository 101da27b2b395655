// Where the rows of a quill parameter lie in the checkpoint tensors that hold it (io/hf_names.h:
// CheckpointPart), both ways. Rows are those of dimension -2 within each leading block (experts); a
// 1-D parameter is one row of all its elements. A part is the whole parameter with gate/up rows
// interleaved (release form), or a row range [row_begin, row_begin + rows) of every block
// (transformers' gate_proj / up_proj), or the parameter as it is.
//
// The load reads file rows and asks where each goes (PartRows::internal_row); the streamed export
// holds a range of the parameter's elements and asks where each row is written (PartRowIndex::of).
#pragma once

#include <cstdint>
#include <vector>

#include "io/hf_names.h"
#include "model/params.h"

namespace quill {

// Row r of an interleaved [.., 2F, C] block is split row r/2 (gate, r even) or F + r/2 (up, r odd).
inline int64_t split_row_of(int64_t r, int64_t f) { return (r % 2 == 0) ? r / 2 : f + r / 2; }

// How the rows of one checkpoint part map onto the parameter's internal rows: the part has
// `file_rows` rows of `cols` values; file row i is internal row internal_row(i).
struct PartRows {
  int64_t cols = 1, file_rows = 1;
  int64_t block_rows = 1;  // internal rows per leading block (dimension -2 of the parameter)
  int64_t part_rows = 1;   // rows per block in the part
  int64_t row_begin = 0;
  bool interleaved = false;

  bool identity() const { return !interleaved && part_rows == block_rows; }
  int64_t internal_row(int64_t i) const {
    const int64_t block = i / part_rows, j = i % part_rows;
    return block * block_rows + (interleaved ? split_row_of(j, block_rows / 2) : row_begin + j);
  }
};

// p: the whole parameter (its global shape).
PartRows part_rows(const Param& p, const CheckpointPart& part);

// The inverse over all of a parameter's parts: internal row -> (part, file row), from one block's
// table (every block repeats it), so its size is dimension -2 of the parameter, not the tensor's.
class PartRowIndex {
 public:
  struct FileRow {
    size_t part = 0;
    int64_t row = 0;
  };
  // p: the whole parameter; parts: checkpoint_parts(p, form), which must cover every row once.
  PartRowIndex(const Param& p, const std::vector<CheckpointPart>& parts);
  int64_t cols() const { return cols_; }
  FileRow of(int64_t internal_row) const;

 private:
  int64_t cols_ = 1, block_rows_ = 1;
  std::vector<int64_t> part_rows_;      // per part: rows per block
  std::vector<FileRow> block_;          // per internal row of block 0
};

}  // namespace quill
