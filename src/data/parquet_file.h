// A Parquet file opened for reading (docs/parquet.md): memory-mapped, its footer decoded and
// its schema flattened into leaf columns. The layout (parquet-format README, "File format"):
//   "PAR1" | column chunks, row group after row group | FileMetaData (Thrift compact) |
//   4-byte little-endian length of the FileMetaData | "PAR1"
// Opening checks the two magics, the footer length and the footer itself; a file that fails is
// one error naming it: not Parquet, truncated, or a corrupt footer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "data/mapped_file.h"
#include "data/parquet_metadata.h"
#include "data/parquet_schema.h"

namespace quill {

// Whether the file starts with the Parquet magic "PAR1" (false for a shorter file). Errors only
// when it cannot be opened.
bool has_parquet_magic(const std::string& path);

class ParquetFile {
 public:
  explicit ParquetFile(const std::string& path);
  ParquetFile(const ParquetFile&) = delete;
  ParquetFile& operator=(const ParquetFile&) = delete;

  const std::string& path() const { return path_; }
  std::string_view bytes() const { return file_.view(); }
  const ParquetFileMeta& meta() const { return meta_; }
  int64_t num_rows() const { return meta_.num_rows; }
  size_t row_groups() const { return meta_.row_groups.size(); }
  const std::vector<ParquetLeaf>& leaves() const { return leaves_; }
  // The leaf with this dotted path, or nullptr.
  const ParquetLeaf* find_leaf(std::string_view dotted) const;
  // The leaves under the top-level field `name` (itself, when it is a leaf).
  std::vector<const ParquetLeaf*> leaves_under(std::string_view name) const;

  // The metadata of `leaf`'s chunk in row group g, checked against the schema and the file:
  // present, in this file, not encrypted, its path and type the leaf's, its pages inside the
  // file's data. Errors name the file, row group and column.
  const ParquetColumnMeta& chunk_meta(size_t g, const ParquetLeaf& leaf) const;
  // Where column chunks may lie: [4, the footer's first byte).
  size_t data_end() const { return data_end_; }

 private:
  std::string path_;
  MappedFile file_;
  size_t data_end_ = 0;
  ParquetFileMeta meta_;
  std::vector<ParquetLeaf> leaves_;
};

}  // namespace quill
