#include "io/hf_part_rows.h"

#include "base/error.h"

namespace quill {

PartRows part_rows(const Param& p, const CheckpointPart& part) {
  PartRows r;
  r.interleaved = part.interleaved;
  r.row_begin = part.row_begin;
  if (p.shape.size() < 2) {
    r.cols = shape_numel(p.shape);
    return r;
  }
  r.cols = p.shape.back();
  r.block_rows = p.shape[p.shape.size() - 2];
  r.part_rows = part.shape[part.shape.size() - 2];
  r.file_rows = r.cols > 0 ? shape_numel(part.shape) / r.cols : 0;
  return r;
}

PartRowIndex::PartRowIndex(const Param& p, const std::vector<CheckpointPart>& parts) {
  QUILL_CHECK(!parts.empty(), "parameter {} has no checkpoint tensor", p.name);
  const PartRows first = part_rows(p, parts.front());
  cols_ = first.cols;
  block_rows_ = first.block_rows;
  block_.assign(static_cast<size_t>(block_rows_), FileRow{parts.size(), 0});
  for (size_t k = 0; k < parts.size(); ++k) {
    const PartRows rows = part_rows(p, parts[k]);
    part_rows_.push_back(rows.part_rows);
    for (int64_t i = 0; i < rows.part_rows; ++i) {
      const int64_t r = rows.internal_row(i);  // block 0
      QUILL_CHECK(r >= 0 && r < block_rows_ && block_[static_cast<size_t>(r)].part == parts.size(),
                  "parameter {}: checkpoint tensor {} maps row {} twice or outside the parameter", p.name,
                  parts[k].name, r);
      block_[static_cast<size_t>(r)] = FileRow{k, i};
    }
  }
  for (int64_t r = 0; r < block_rows_; ++r)
    QUILL_CHECK(block_[static_cast<size_t>(r)].part < parts.size(), "parameter {}: row {} is in no checkpoint tensor",
                p.name, r);
}

PartRowIndex::FileRow PartRowIndex::of(int64_t internal_row) const {
  const int64_t block = internal_row / block_rows_;
  const FileRow& f = block_[static_cast<size_t>(internal_row % block_rows_)];
  return FileRow{f.part, block * part_rows_[f.part] + f.row};
}

}  // namespace quill
