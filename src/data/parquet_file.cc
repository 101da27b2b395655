#include "data/parquet_file.h"

#include <cstring>
#include <fstream>

#include "base/error.h"

namespace quill {

namespace {

constexpr std::string_view kMagic = "PAR1";
constexpr std::string_view kEncryptedMagic = "PARE";  // a file with an encrypted footer
constexpr size_t kMinFileBytes = 12;                  // two magics and the footer length

}  // namespace

bool has_parquet_magic(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  QUILL_CHECK(f.good(), "{}: cannot open", path);
  char head[4] = {};
  f.read(head, 4);
  return f.gcount() == 4 && std::string_view(head, 4) == kMagic;
}

ParquetFile::ParquetFile(const std::string& path) : path_(path), file_(path) {
  std::string_view b = file_.view();
  QUILL_CHECK(b.size() >= 4 && b.substr(0, 4) == kMagic,
              "{}: not a Parquet file (it does not start with the magic PAR1)", path_);
  QUILL_CHECK(b.size() >= kMinFileBytes, "{}: truncated Parquet file ({} bytes; the shortest has {})", path_,
              b.size(), kMinFileBytes);
  std::string_view tail = b.substr(b.size() - 4);
  QUILL_CHECK(tail != kEncryptedMagic, "{}: the footer is encrypted (PARE), which quill does not read", path_);
  QUILL_CHECK(tail == kMagic,
              "{}: truncated Parquet file: it does not end with the magic PAR1 ({} bytes; a file cut short, or "
              "still being written?)",
              path_, b.size());
  uint32_t footer_len;
  std::memcpy(&footer_len, b.data() + b.size() - 8, 4);
  QUILL_CHECK(footer_len > 0 && footer_len <= b.size() - kMinFileBytes,
              "{}: corrupt footer: its length {} does not fit the file's {} bytes", path_, footer_len, b.size());
  data_end_ = b.size() - 8 - footer_len;
  std::string what = path_ + ": footer";
  meta_ = decode_parquet_file_meta(b.substr(data_end_, footer_len), what);
  QUILL_CHECK(!meta_.encrypted, "{}: the file is encrypted, which quill does not read", path_);
  leaves_ = parquet_leaves(meta_.schema, what);
  QUILL_CHECK(meta_.num_rows >= 0, "{}: corrupt footer: num_rows {}", path_, meta_.num_rows);
  int64_t rows = 0;
  for (size_t g = 0; g < meta_.row_groups.size(); ++g) {
    const ParquetRowGroup& rg = meta_.row_groups[g];
    QUILL_CHECK(rg.num_rows >= 0, "{}: corrupt footer: row group {} has {} rows", path_, g, rg.num_rows);
    QUILL_CHECK(rg.columns.size() == leaves_.size(), "{}: corrupt footer: row group {} has {} columns, the schema {}",
                path_, g, rg.columns.size(), leaves_.size());
    rows += rg.num_rows;
  }
  QUILL_CHECK(rows == meta_.num_rows, "{}: corrupt footer: the row groups hold {} rows, the file says {}", path_, rows,
              meta_.num_rows);
}

const ParquetLeaf* ParquetFile::find_leaf(std::string_view dotted) const {
  for (const ParquetLeaf& l : leaves_) {
    if (l.dotted == dotted) return &l;
  }
  return nullptr;
}

std::vector<const ParquetLeaf*> ParquetFile::leaves_under(std::string_view name) const {
  std::vector<const ParquetLeaf*> out;
  for (const ParquetLeaf& l : leaves_) {
    if (l.path.front().name == name) out.push_back(&l);
  }
  return out;
}

const ParquetColumnMeta& ParquetFile::chunk_meta(size_t g, const ParquetLeaf& leaf) const {
  const ParquetColumnChunk& c = meta_.row_groups.at(g).columns.at(static_cast<size_t>(leaf.index));
  auto where = [&] { return fmt::format("{}: row group {}, column {}", path_, g, leaf.dotted); };
  QUILL_CHECK(!c.file_path.has_value(), "{}: the chunk is in another file ('{}'), which quill does not read", where(),
              *c.file_path);
  QUILL_CHECK(!c.encrypted, "{}: the chunk is encrypted, which quill does not read", where());
  QUILL_CHECK(c.meta.has_value(), "{}: corrupt footer: the chunk has no ColumnMetaData", where());
  const ParquetColumnMeta& m = *c.meta;
  bool same_path = m.path.size() == leaf.path.size();
  for (size_t i = 0; same_path && i < m.path.size(); ++i) same_path = m.path[i] == leaf.path[i].name;
  QUILL_CHECK(same_path, "{}: corrupt footer: the chunk's path_in_schema does not name this column", where());
  QUILL_CHECK(m.type == leaf.type, "{}: corrupt footer: the chunk is {}, the schema says {}", where(),
              parquet_type_name(m.type), parquet_type_name(leaf.type));
  QUILL_CHECK(m.num_values >= 0, "{}: corrupt footer: num_values {}", where(), m.num_values);
  int64_t start = m.data_page_offset;
  if (m.dictionary_page_offset && *m.dictionary_page_offset > 0 && *m.dictionary_page_offset < start) {
    start = *m.dictionary_page_offset;
  }
  QUILL_CHECK(start >= 4 && m.total_compressed_size >= 0 &&
                  static_cast<uint64_t>(start) + static_cast<uint64_t>(m.total_compressed_size) <= data_end_,
              "{}: corrupt footer: the chunk's pages (bytes {}..{}) are not inside the file's data (4..{})", where(),
              start, start + m.total_compressed_size, data_end_);
  return m;
}

}  // namespace quill
