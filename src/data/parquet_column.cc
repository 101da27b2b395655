#include "data/parquet_column.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "data/parquet_levels.h"

namespace quill {

namespace {

bool is_dictionary_encoding(ParquetEncoding e) {
  return e == ParquetEncoding::kPlainDictionary || e == ParquetEncoding::kRleDictionary;
}

// Appends `count` PLAIN byte arrays (4-byte little-endian length, then the bytes) from `data`.
void decode_plain_byte_arrays(std::string_view data, size_t count, std::vector<std::string_view>& out,
                              const std::string& what) {
  size_t pos = 0;
  for (size_t i = 0; i < count; ++i) {
    QUILL_CHECK(data.size() - pos >= 4, "{}: PLAIN values end after {} of {} (a length is cut off)", what, i, count);
    uint32_t len;
    std::memcpy(&len, data.data() + pos, 4);
    pos += 4;
    QUILL_CHECK(len <= data.size() - pos, "{}: PLAIN value {} of {} bytes, only {} left in the page", what, i, len,
                data.size() - pos);
    out.push_back(data.substr(pos, len));
    pos += len;
  }
}

// The reading of one chunk: the pages in order and what they have filled so far.
class ChunkReader {
 public:
  ChunkReader(const ParquetFile& file, size_t g, const ParquetLeaf& leaf, PageDecompressor& decompressor)
      : file_(file), leaf_(leaf), meta_(file.chunk_meta(g, leaf)), decompressor_(decompressor),
        what_(fmt::format("{}: row group {}, column {}", file.path(), g, leaf.dotted)) {
    QUILL_CHECK(leaf.type == ParquetType::kByteArray, "{}: the column is {}, expected BYTE_ARRAY (strings)", what_,
                parquet_type_name(leaf.type));
    QUILL_CHECK(parquet_codec_supported(meta_.codec),
                "{}: codec {} is not supported (quill reads UNCOMPRESSED, SNAPPY and ZSTD)", what_,
                parquet_codec_name(meta_.codec));
  }

  ByteArrayChunk read() {
    int64_t start = meta_.data_page_offset;
    if (meta_.dictionary_page_offset && *meta_.dictionary_page_offset > 0 && *meta_.dictionary_page_offset < start) {
      start = *meta_.dictionary_page_offset;
    }
    std::string_view chunk = file_.bytes().substr(static_cast<size_t>(start), static_cast<size_t>(meta_.total_compressed_size));
    // Reserve what the metadata promises, but no more than the bytes could hold (a level takes at
    // least one bit of a run... or nothing in a long RLE run, so this is only a first guess).
    size_t guess = static_cast<size_t>(std::min<int64_t>(meta_.num_values, 8 * meta_.total_uncompressed_size + 64));
    out_.rep.reserve(guess);
    out_.def.reserve(guess);
    out_.values.reserve(guess);
    size_t pos = 0;
    int page = 0;
    while (static_cast<int64_t>(out_.def.size()) < meta_.num_values) {
      QUILL_CHECK(pos < chunk.size(), "{}: the chunk's pages end after {} of its {} values", what_, out_.def.size(),
                  meta_.num_values);
      std::string where = fmt::format("{}, page {} (byte {})", what_, page, static_cast<size_t>(start) + pos);
      size_t header_bytes = 0;
      ParquetPageHeader h = decode_parquet_page_header(chunk.substr(pos), where + " header", header_bytes);
      pos += header_bytes;
      QUILL_CHECK(static_cast<size_t>(h.compressed_page_size) <= chunk.size() - pos,
                  "{}: a page of {} bytes, but the chunk has {} left (truncated or corrupt)", where,
                  h.compressed_page_size, chunk.size() - pos);
      std::string_view payload = chunk.substr(pos, static_cast<size_t>(h.compressed_page_size));
      pos += payload.size();
      switch (h.type) {
        case ParquetPageType::kDictionaryPage: read_dictionary(h, payload, where); break;
        case ParquetPageType::kDataPage: read_data_v1(h, payload, where); break;
        case ParquetPageType::kDataPageV2: read_data_v2(h, payload, where); break;
        case ParquetPageType::kIndexPage: break;  // nothing the values need
        default: QUILL_FAIL("{}: unknown page type {}", where, static_cast<int>(h.type));
      }
      ++page;
    }
    QUILL_CHECK(static_cast<int64_t>(out_.def.size()) == meta_.num_values,
                "{}: the pages hold {} values, the metadata says {}", what_, out_.def.size(), meta_.num_values);
    return std::move(out_);
  }

 private:
  // The page's uncompressed bytes: in place when the chunk is not compressed (or the page says
  // so), else decompressed into a buffer: kept in the chunk when values will point into it,
  // else the reader's scratch, reused page after page.
  std::string_view uncompress(std::string_view src, size_t size, bool compressed, bool keep, const std::string& where) {
    if (!compressed || meta_.codec == ParquetCodec::kUncompressed) {
      QUILL_CHECK(src.size() == size, "{}: an uncompressed page of {} bytes, its header says {}", where, src.size(),
                  size);
      return src;
    }
    char* dst;
    if (keep) {
      out_.buffers.push_back(std::make_unique_for_overwrite<char[]>(std::max<size_t>(size, 1)));
      dst = out_.buffers.back().get();
    } else {
      if (scratch_.size() < size) scratch_.resize(size);
      dst = scratch_.data();
    }
    decompressor_.decompress(meta_.codec, src, dst, size, where);
    return {dst, size};
  }

  void read_dictionary(const ParquetPageHeader& h, std::string_view payload, const std::string& where) {
    QUILL_CHECK(h.dictionary_page.has_value(), "{}: a dictionary page without its DictionaryPageHeader", where);
    QUILL_CHECK(!out_.dictionary, "{}: a second dictionary page in the chunk", where);
    QUILL_CHECK(out_.def.empty(), "{}: a dictionary page after data pages", where);
    const ParquetDictionaryPage& d = *h.dictionary_page;
    QUILL_CHECK(d.encoding == ParquetEncoding::kPlain || d.encoding == ParquetEncoding::kPlainDictionary,
                "{}: dictionary encoding {} is not supported (quill reads PLAIN dictionaries)", where,
                parquet_encoding_name(d.encoding));
    QUILL_CHECK(d.num_values >= 0, "{}: a dictionary of {} values", where, d.num_values);
    std::string_view data = uncompress(payload, static_cast<size_t>(h.uncompressed_page_size), true, true, where);
    dict_.reserve(static_cast<size_t>(std::min<int64_t>(d.num_values, data.size() / 4 + 1)));
    decode_plain_byte_arrays(data, static_cast<size_t>(d.num_values), dict_, where);
    out_.dictionary = true;
  }

  // How many of the levels from `first` on are non-null (the values the page stores).
  size_t count_present(size_t first) const {
    return static_cast<size_t>(std::count(out_.def.begin() + static_cast<ptrdiff_t>(first), out_.def.end(),
                                          static_cast<uint8_t>(leaf_.max_def)));
  }

  void check_level_encoding(ParquetEncoding e, const char* which, int max_level, const std::string& where) const {
    QUILL_CHECK(max_level == 0 || e == ParquetEncoding::kRle,
                "{}: {} level encoding {} is not supported (quill reads RLE levels)", where, which,
                parquet_encoding_name(e));
  }

  void read_data_v1(const ParquetPageHeader& h, std::string_view payload, const std::string& where) {
    QUILL_CHECK(h.data_page.has_value(), "{}: a data page without its DataPageHeader", where);
    const ParquetDataPageV1& p = *h.data_page;
    QUILL_CHECK(p.num_values >= 0, "{}: a page of {} values", where, p.num_values);
    check_level_encoding(p.repetition_level_encoding, "repetition", leaf_.max_rep, where);
    check_level_encoding(p.definition_level_encoding, "definition", leaf_.max_def, where);
    check_value_encoding(p.encoding, where);
    bool keep = p.encoding == ParquetEncoding::kPlain;
    std::string_view data = uncompress(payload, static_cast<size_t>(h.uncompressed_page_size), true, keep, where);
    size_t n = static_cast<size_t>(p.num_values), first = out_.def.size();
    out_.rep.resize(first + n);
    out_.def.resize(first + n);
    size_t used = 0;
    decode_levels_v1(data, leaf_.max_rep, n, out_.rep.data() + first, where + ", repetition levels", used);
    data.remove_prefix(used);
    decode_levels_v1(data, leaf_.max_def, n, out_.def.data() + first, where + ", definition levels", used);
    data.remove_prefix(used);
    read_values(p.encoding, data, count_present(first), where);
    ++out_.pages_v1;
  }

  void read_data_v2(const ParquetPageHeader& h, std::string_view payload, const std::string& where) {
    QUILL_CHECK(h.data_page_v2.has_value(), "{}: a data page v2 without its DataPageHeaderV2", where);
    const ParquetDataPageV2& p = *h.data_page_v2;
    QUILL_CHECK(p.num_values >= 0 && p.num_nulls >= 0 && p.num_nulls <= p.num_values && p.num_rows >= 0,
                "{}: a page of {} values, {} nulls, {} rows", where, p.num_values, p.num_nulls, p.num_rows);
    QUILL_CHECK(p.repetition_levels_byte_length >= 0 && p.definition_levels_byte_length >= 0 &&
                    static_cast<uint64_t>(p.repetition_levels_byte_length) + p.definition_levels_byte_length <=
                        std::min(payload.size(), static_cast<size_t>(h.uncompressed_page_size)),
                "{}: levels of {} + {} bytes do not fit a page of {} bytes", where, p.repetition_levels_byte_length,
                p.definition_levels_byte_length, payload.size());
    check_value_encoding(p.encoding, where);
    size_t n = static_cast<size_t>(p.num_values), first = out_.def.size();
    out_.rep.resize(first + n);
    out_.def.resize(first + n);
    // The levels come first and are never compressed; only the values section may be.
    size_t rep_bytes = static_cast<size_t>(p.repetition_levels_byte_length);
    size_t def_bytes = static_cast<size_t>(p.definition_levels_byte_length);
    decode_levels_v2(payload.substr(0, rep_bytes), leaf_.max_rep, n, out_.rep.data() + first,
                     where + ", repetition levels");
    decode_levels_v2(payload.substr(rep_bytes, def_bytes), leaf_.max_def, n, out_.def.data() + first,
                     where + ", definition levels");
    size_t present = count_present(first);
    QUILL_CHECK(present == n - static_cast<size_t>(p.num_nulls),
                "{}: the definition levels give {} nulls, the page header says {}", where, n - present, p.num_nulls);
    size_t rows = static_cast<size_t>(std::count(out_.rep.begin() + static_cast<ptrdiff_t>(first), out_.rep.end(), 0));
    QUILL_CHECK(rows == static_cast<size_t>(p.num_rows), "{}: the repetition levels start {} rows, the page header says {}",
                where, rows, p.num_rows);
    QUILL_CHECK(n == 0 || out_.rep[first] == 0, "{}: a data page v2 that starts inside a row", where);
    bool keep = p.encoding == ParquetEncoding::kPlain;
    std::string_view values = payload.substr(rep_bytes + def_bytes);
    std::string_view data = uncompress(values, static_cast<size_t>(h.uncompressed_page_size) - rep_bytes - def_bytes,
                                       p.is_compressed, keep, where);
    read_values(p.encoding, data, present, where);
    ++out_.pages_v2;
  }

  void check_value_encoding(ParquetEncoding e, const std::string& where) const {
    QUILL_CHECK(e == ParquetEncoding::kPlain || is_dictionary_encoding(e),
                "{}: encoding {} is not supported (quill reads PLAIN, PLAIN_DICTIONARY and RLE_DICTIONARY byte "
                "arrays)",
                where, parquet_encoding_name(e));
  }

  void read_values(ParquetEncoding e, std::string_view data, size_t count, const std::string& where) {
    if (e == ParquetEncoding::kPlain) {
      ++out_.plain_pages;
      decode_plain_byte_arrays(data, count, out_.values, where);
      return;
    }
    QUILL_CHECK(out_.dictionary, "{}: dictionary-encoded values ({}) without a dictionary page", where,
                parquet_encoding_name(e));
    if (count == 0) return;  // a page of nulls may still carry the bit width; nothing to look up
    QUILL_CHECK(!data.empty(), "{}: the dictionary indices' bit width is missing", where);
    int width = static_cast<uint8_t>(data[0]);
    QUILL_CHECK(width <= 32, "{}: dictionary indices of {} bits (at most 32)", where, width);
    RleBitPackedDecoder decoder(data.substr(1), width, where + ", dictionary indices");
    if (indices_.size() < count) indices_.resize(count);
    decoder.decode(indices_.data(), count);
    for (size_t i = 0; i < count; ++i) {
      QUILL_CHECK(indices_[i] < dict_.size(), "{}: dictionary index {} of value {}, the dictionary has {}", where,
                  indices_[i], i, dict_.size());
      out_.values.push_back(dict_[indices_[i]]);
    }
  }

  const ParquetFile& file_;
  const ParquetLeaf& leaf_;
  const ParquetColumnMeta& meta_;
  PageDecompressor& decompressor_;
  std::string what_;
  ByteArrayChunk out_;
  std::vector<std::string_view> dict_;
  std::vector<uint32_t> indices_;
  std::vector<char> scratch_;
};

}  // namespace

ByteArrayChunk read_byte_array_chunk(const ParquetFile& file, size_t g, const ParquetLeaf& leaf,
                                     PageDecompressor& decompressor) {
  return ChunkReader(file, g, leaf, decompressor).read();
}

}  // namespace quill
