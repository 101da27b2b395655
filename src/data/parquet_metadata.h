// The parts of Parquet's Thrift structures that quill's reader uses (docs/parquet.md), with the
// field ids and enum values of parquet-format's src/main/thrift/parquet.thrift. Fields the reader
// does not need (statistics, indexes, key/value metadata, bloom filters, ...) are skipped while
// decoding; a required field that is missing is an error.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace quill {

// parquet.thrift `enum Type`.
enum class ParquetType : int32_t {
  kBoolean = 0,
  kInt32 = 1,
  kInt64 = 2,
  kInt96 = 3,
  kFloat = 4,
  kDouble = 5,
  kByteArray = 6,
  kFixedLenByteArray = 7,
};
// `enum FieldRepetitionType`.
enum class ParquetRepetition : int32_t { kRequired = 0, kOptional = 1, kRepeated = 2 };
// `enum Encoding`.
enum class ParquetEncoding : int32_t {
  kPlain = 0,
  kPlainDictionary = 2,
  kRle = 3,
  kBitPacked = 4,
  kDeltaBinaryPacked = 5,
  kDeltaLengthByteArray = 6,
  kDeltaByteArray = 7,
  kRleDictionary = 8,
  kByteStreamSplit = 9,
};
// `enum CompressionCodec`.
enum class ParquetCodec : int32_t {
  kUncompressed = 0,
  kSnappy = 1,
  kGzip = 2,
  kLzo = 3,
  kBrotli = 4,
  kLz4 = 5,
  kZstd = 6,
  kLz4Raw = 7,
};
// `enum PageType`.
enum class ParquetPageType : int32_t { kDataPage = 0, kIndexPage = 1, kDictionaryPage = 2, kDataPageV2 = 3 };

// Names for messages ("SNAPPY", "RLE_DICTIONARY", "BYTE_ARRAY"; "code 12" when unknown).
std::string parquet_type_name(ParquetType t);
std::string parquet_encoding_name(ParquetEncoding e);
std::string parquet_codec_name(ParquetCodec c);

// `struct SchemaElement` (fields 1-6; scale, precision, field_id and logicalType skipped).
struct ParquetSchemaElement {
  std::string name;
  std::optional<ParquetType> type;  // absent on groups
  std::optional<ParquetRepetition> repetition;  // absent on the root
  int32_t num_children = 0;
  std::optional<int32_t> converted_type;
};

// `struct ColumnMetaData` (the fields the reader uses).
struct ParquetColumnMeta {
  ParquetType type = ParquetType::kBoolean;
  std::vector<std::string> path;  // path_in_schema
  ParquetCodec codec = ParquetCodec::kUncompressed;
  int64_t num_values = 0;
  int64_t total_uncompressed_size = 0;
  int64_t total_compressed_size = 0;
  int64_t data_page_offset = 0;
  std::optional<int64_t> dictionary_page_offset;
};

// `struct ColumnChunk`.
struct ParquetColumnChunk {
  std::optional<std::string> file_path;  // set: the chunk lives in another file (not read)
  std::optional<ParquetColumnMeta> meta;
  bool encrypted = false;  // crypto_metadata or encrypted_column_metadata present
};

// `struct RowGroup`.
struct ParquetRowGroup {
  std::vector<ParquetColumnChunk> columns;
  int64_t num_rows = 0;
};

// `struct FileMetaData`.
struct ParquetFileMeta {
  int32_t version = 0;
  std::vector<ParquetSchemaElement> schema;  // depth first, the root first
  int64_t num_rows = 0;
  std::vector<ParquetRowGroup> row_groups;
  std::string created_by;
  bool encrypted = false;  // encryption_algorithm present
};

// `struct DataPageHeader`.
struct ParquetDataPageV1 {
  int32_t num_values = 0;
  ParquetEncoding encoding = ParquetEncoding::kPlain;
  ParquetEncoding definition_level_encoding = ParquetEncoding::kRle;
  ParquetEncoding repetition_level_encoding = ParquetEncoding::kRle;
};
// `struct DictionaryPageHeader`.
struct ParquetDictionaryPage {
  int32_t num_values = 0;
  ParquetEncoding encoding = ParquetEncoding::kPlain;
};
// `struct DataPageHeaderV2`.
struct ParquetDataPageV2 {
  int32_t num_values = 0;
  int32_t num_nulls = 0;
  int32_t num_rows = 0;
  ParquetEncoding encoding = ParquetEncoding::kPlain;
  int32_t definition_levels_byte_length = 0;
  int32_t repetition_levels_byte_length = 0;
  bool is_compressed = true;  // the Thrift default
};
// `struct PageHeader`.
struct ParquetPageHeader {
  ParquetPageType type = ParquetPageType::kDataPage;
  int32_t uncompressed_page_size = 0;
  int32_t compressed_page_size = 0;
  std::optional<ParquetDataPageV1> data_page;
  std::optional<ParquetDictionaryPage> dictionary_page;
  std::optional<ParquetDataPageV2> data_page_v2;
};

// Decodes the footer's FileMetaData from `bytes` (exactly the footer). Errors start with `what`.
ParquetFileMeta decode_parquet_file_meta(std::string_view bytes, const std::string& what);
// Decodes one page header from the start of `bytes`; `header_bytes` gets its encoded length.
ParquetPageHeader decode_parquet_page_header(std::string_view bytes, const std::string& what, size_t& header_bytes);

}  // namespace quill
