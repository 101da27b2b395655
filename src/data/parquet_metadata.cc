#include "data/parquet_metadata.h"

#include <fmt/format.h>

#include "data/thrift_compact.h"

namespace quill {

std::string parquet_type_name(ParquetType t) {
  switch (t) {
    case ParquetType::kBoolean: return "BOOLEAN";
    case ParquetType::kInt32: return "INT32";
    case ParquetType::kInt64: return "INT64";
    case ParquetType::kInt96: return "INT96";
    case ParquetType::kFloat: return "FLOAT";
    case ParquetType::kDouble: return "DOUBLE";
    case ParquetType::kByteArray: return "BYTE_ARRAY";
    case ParquetType::kFixedLenByteArray: return "FIXED_LEN_BYTE_ARRAY";
  }
  return fmt::format("type {}", static_cast<int32_t>(t));
}

std::string parquet_encoding_name(ParquetEncoding e) {
  switch (e) {
    case ParquetEncoding::kPlain: return "PLAIN";
    case ParquetEncoding::kPlainDictionary: return "PLAIN_DICTIONARY";
    case ParquetEncoding::kRle: return "RLE";
    case ParquetEncoding::kBitPacked: return "BIT_PACKED";
    case ParquetEncoding::kDeltaBinaryPacked: return "DELTA_BINARY_PACKED";
    case ParquetEncoding::kDeltaLengthByteArray: return "DELTA_LENGTH_BYTE_ARRAY";
    case ParquetEncoding::kDeltaByteArray: return "DELTA_BYTE_ARRAY";
    case ParquetEncoding::kRleDictionary: return "RLE_DICTIONARY";
    case ParquetEncoding::kByteStreamSplit: return "BYTE_STREAM_SPLIT";
  }
  return fmt::format("encoding {}", static_cast<int32_t>(e));
}

std::string parquet_codec_name(ParquetCodec c) {
  switch (c) {
    case ParquetCodec::kUncompressed: return "UNCOMPRESSED";
    case ParquetCodec::kSnappy: return "SNAPPY";
    case ParquetCodec::kGzip: return "GZIP";
    case ParquetCodec::kLzo: return "LZO";
    case ParquetCodec::kBrotli: return "BROTLI";
    case ParquetCodec::kLz4: return "LZ4";
    case ParquetCodec::kZstd: return "ZSTD";
    case ParquetCodec::kLz4Raw: return "LZ4_RAW";
  }
  return fmt::format("codec {}", static_cast<int32_t>(c));
}

namespace {

using Field = ThriftReader::Field;

// Loops over the fields of a struct: fn(field) returns false for a field it did not read, which
// is then skipped.
template <typename Fn>
void for_each_field(ThriftReader& r, Fn&& fn) {
  r.begin_struct();
  for (Field f = r.next_field(); f.type != ThriftType::kStop; f = r.next_field()) {
    if (!fn(f)) r.skip(f.type);
  }
}

void expect_struct(ThriftReader& r, const Field& f, const char* name) {
  if (f.type != ThriftType::kStruct) r.fail(fmt::format("field {} is not a struct", name));
}

void require(ThriftReader& r, bool seen, const char* name) {
  if (!seen) r.fail(fmt::format("the required field {} is missing", name));
}

ParquetSchemaElement decode_schema_element(ThriftReader& r) {
  ParquetSchemaElement e;
  bool name = false;
  for_each_field(r, [&](const Field& f) {
    switch (f.id) {
      case 1: e.type = static_cast<ParquetType>(r.read_i32_field(f, "SchemaElement.type")); return true;
      case 3:
        e.repetition = static_cast<ParquetRepetition>(r.read_i32_field(f, "SchemaElement.repetition_type"));
        return true;
      case 4: e.name = r.read_binary_field(f, "SchemaElement.name"); name = true; return true;
      case 5: e.num_children = r.read_i32_field(f, "SchemaElement.num_children"); return true;
      case 6: e.converted_type = r.read_i32_field(f, "SchemaElement.converted_type"); return true;
      default: return false;
    }
  });
  require(r, name, "SchemaElement.name");
  return e;
}

ParquetColumnMeta decode_column_meta(ThriftReader& r) {
  ParquetColumnMeta m;
  uint32_t seen = 0;  // bit i: required field i
  for_each_field(r, [&](const Field& f) {
    switch (f.id) {
      case 1: m.type = static_cast<ParquetType>(r.read_i32_field(f, "ColumnMetaData.type")); break;
      case 2: {  // encodings: what the pages say is what the reader goes by
        int64_t n = r.read_list_field(f, ThriftType::kI32, "ColumnMetaData.encodings");
        for (int64_t i = 0; i < n; ++i) r.read_i32();
        break;
      }
      case 3: {
        int64_t n = r.read_list_field(f, ThriftType::kBinary, "ColumnMetaData.path_in_schema");
        for (int64_t i = 0; i < n; ++i) m.path.emplace_back(r.read_binary());
        break;
      }
      case 4: m.codec = static_cast<ParquetCodec>(r.read_i32_field(f, "ColumnMetaData.codec")); break;
      case 5: m.num_values = r.read_i64_field(f, "ColumnMetaData.num_values"); break;
      case 6: m.total_uncompressed_size = r.read_i64_field(f, "ColumnMetaData.total_uncompressed_size"); break;
      case 7: m.total_compressed_size = r.read_i64_field(f, "ColumnMetaData.total_compressed_size"); break;
      case 9: m.data_page_offset = r.read_i64_field(f, "ColumnMetaData.data_page_offset"); break;
      case 11: m.dictionary_page_offset = r.read_i64_field(f, "ColumnMetaData.dictionary_page_offset"); break;
      default: return false;
    }
    seen |= 1u << f.id;
    return true;
  });
  static constexpr std::pair<int, const char*> kRequired[] = {
      {1, "ColumnMetaData.type"},       {2, "ColumnMetaData.encodings"},
      {3, "ColumnMetaData.path_in_schema"}, {4, "ColumnMetaData.codec"},
      {5, "ColumnMetaData.num_values"}, {6, "ColumnMetaData.total_uncompressed_size"},
      {7, "ColumnMetaData.total_compressed_size"}, {9, "ColumnMetaData.data_page_offset"}};
  for (const auto& [id, name] : kRequired) require(r, seen & (1u << id), name);
  return m;
}

ParquetColumnChunk decode_column_chunk(ThriftReader& r) {
  ParquetColumnChunk c;
  for_each_field(r, [&](const Field& f) {
    switch (f.id) {
      case 1: c.file_path = std::string(r.read_binary_field(f, "ColumnChunk.file_path")); return true;
      case 3: expect_struct(r, f, "ColumnChunk.meta_data"); c.meta = decode_column_meta(r); return true;
      case 8:
      case 9: c.encrypted = true; return false;
      default: return false;
    }
  });
  return c;
}

ParquetRowGroup decode_row_group(ThriftReader& r) {
  ParquetRowGroup g;
  bool columns = false, rows = false;
  for_each_field(r, [&](const Field& f) {
    switch (f.id) {
      case 1: {
        int64_t n = r.read_list_field(f, ThriftType::kStruct, "RowGroup.columns");
        g.columns.reserve(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) g.columns.push_back(decode_column_chunk(r));
        columns = true;
        return true;
      }
      case 3: g.num_rows = r.read_i64_field(f, "RowGroup.num_rows"); rows = true; return true;
      default: return false;
    }
  });
  require(r, columns, "RowGroup.columns");
  require(r, rows, "RowGroup.num_rows");
  return g;
}

}  // namespace

ParquetFileMeta decode_parquet_file_meta(std::string_view bytes, const std::string& what) {
  ThriftReader r(bytes, what);
  ParquetFileMeta m;
  bool version = false, schema = false, rows = false, groups = false;
  for_each_field(r, [&](const Field& f) {
    switch (f.id) {
      case 1: m.version = r.read_i32_field(f, "FileMetaData.version"); version = true; return true;
      case 2: {
        int64_t n = r.read_list_field(f, ThriftType::kStruct, "FileMetaData.schema");
        m.schema.reserve(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) m.schema.push_back(decode_schema_element(r));
        schema = true;
        return true;
      }
      case 3: m.num_rows = r.read_i64_field(f, "FileMetaData.num_rows"); rows = true; return true;
      case 4: {
        int64_t n = r.read_list_field(f, ThriftType::kStruct, "FileMetaData.row_groups");
        m.row_groups.reserve(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) m.row_groups.push_back(decode_row_group(r));
        groups = true;
        return true;
      }
      case 6: m.created_by = r.read_binary_field(f, "FileMetaData.created_by"); return true;
      case 8: m.encrypted = true; return false;
      default: return false;
    }
  });
  require(r, version, "FileMetaData.version");
  require(r, schema, "FileMetaData.schema");
  require(r, rows, "FileMetaData.num_rows");
  require(r, groups, "FileMetaData.row_groups");
  if (r.position() != bytes.size()) {
    r.fail(fmt::format("{} bytes after the end of FileMetaData", bytes.size() - r.position()));
  }
  return m;
}

namespace {

ParquetDataPageV1 decode_data_page_v1(ThriftReader& r) {
  ParquetDataPageV1 p;
  uint32_t seen = 0;
  for_each_field(r, [&](const Field& f) {
    switch (f.id) {
      case 1: p.num_values = r.read_i32_field(f, "DataPageHeader.num_values"); break;
      case 2: p.encoding = static_cast<ParquetEncoding>(r.read_i32_field(f, "DataPageHeader.encoding")); break;
      case 3:
        p.definition_level_encoding =
            static_cast<ParquetEncoding>(r.read_i32_field(f, "DataPageHeader.definition_level_encoding"));
        break;
      case 4:
        p.repetition_level_encoding =
            static_cast<ParquetEncoding>(r.read_i32_field(f, "DataPageHeader.repetition_level_encoding"));
        break;
      default: return false;
    }
    seen |= 1u << f.id;
    return true;
  });
  require(r, seen & 2, "DataPageHeader.num_values");
  require(r, seen & 4, "DataPageHeader.encoding");
  require(r, seen & 8, "DataPageHeader.definition_level_encoding");
  require(r, seen & 16, "DataPageHeader.repetition_level_encoding");
  return p;
}

ParquetDictionaryPage decode_dictionary_page(ThriftReader& r) {
  ParquetDictionaryPage p;
  uint32_t seen = 0;
  for_each_field(r, [&](const Field& f) {
    switch (f.id) {
      case 1: p.num_values = r.read_i32_field(f, "DictionaryPageHeader.num_values"); break;
      case 2: p.encoding = static_cast<ParquetEncoding>(r.read_i32_field(f, "DictionaryPageHeader.encoding")); break;
      default: return false;
    }
    seen |= 1u << f.id;
    return true;
  });
  require(r, seen & 2, "DictionaryPageHeader.num_values");
  require(r, seen & 4, "DictionaryPageHeader.encoding");
  return p;
}

ParquetDataPageV2 decode_data_page_v2(ThriftReader& r) {
  ParquetDataPageV2 p;
  uint32_t seen = 0;
  for_each_field(r, [&](const Field& f) {
    switch (f.id) {
      case 1: p.num_values = r.read_i32_field(f, "DataPageHeaderV2.num_values"); break;
      case 2: p.num_nulls = r.read_i32_field(f, "DataPageHeaderV2.num_nulls"); break;
      case 3: p.num_rows = r.read_i32_field(f, "DataPageHeaderV2.num_rows"); break;
      case 4: p.encoding = static_cast<ParquetEncoding>(r.read_i32_field(f, "DataPageHeaderV2.encoding")); break;
      case 5: p.definition_levels_byte_length = r.read_i32_field(f, "DataPageHeaderV2.definition_levels_byte_length"); break;
      case 6: p.repetition_levels_byte_length = r.read_i32_field(f, "DataPageHeaderV2.repetition_levels_byte_length"); break;
      case 7: p.is_compressed = r.read_bool_field(f, "DataPageHeaderV2.is_compressed"); break;
      default: return false;
    }
    seen |= 1u << f.id;
    return true;
  });
  static constexpr std::pair<int, const char*> kRequired[] = {
      {1, "DataPageHeaderV2.num_values"}, {2, "DataPageHeaderV2.num_nulls"},
      {3, "DataPageHeaderV2.num_rows"},   {4, "DataPageHeaderV2.encoding"},
      {5, "DataPageHeaderV2.definition_levels_byte_length"}, {6, "DataPageHeaderV2.repetition_levels_byte_length"}};
  for (const auto& [id, name] : kRequired) require(r, seen & (1u << id), name);
  return p;
}

}  // namespace

ParquetPageHeader decode_parquet_page_header(std::string_view bytes, const std::string& what, size_t& header_bytes) {
  ThriftReader r(bytes, what);
  ParquetPageHeader h;
  uint32_t seen = 0;
  for_each_field(r, [&](const Field& f) {
    switch (f.id) {
      case 1: h.type = static_cast<ParquetPageType>(r.read_i32_field(f, "PageHeader.type")); break;
      case 2: h.uncompressed_page_size = r.read_i32_field(f, "PageHeader.uncompressed_page_size"); break;
      case 3: h.compressed_page_size = r.read_i32_field(f, "PageHeader.compressed_page_size"); break;
      case 5: expect_struct(r, f, "PageHeader.data_page_header"); h.data_page = decode_data_page_v1(r); break;
      case 7:
        expect_struct(r, f, "PageHeader.dictionary_page_header");
        h.dictionary_page = decode_dictionary_page(r);
        break;
      case 8: expect_struct(r, f, "PageHeader.data_page_header_v2"); h.data_page_v2 = decode_data_page_v2(r); break;
      default: return false;
    }
    seen |= 1u << f.id;
    return true;
  });
  require(r, seen & 2, "PageHeader.type");
  require(r, seen & 4, "PageHeader.uncompressed_page_size");
  require(r, seen & 8, "PageHeader.compressed_page_size");
  if (h.uncompressed_page_size < 0 || h.compressed_page_size < 0) r.fail("a negative page size");
  header_bytes = r.position();
  return h;
}

}  // namespace quill
