// One BYTE_ARRAY column chunk decoded (docs/parquet.md): its pages read in order (an optional
// dictionary page first, then data pages v1 or v2), decompressed, their repetition and
// definition levels decoded (RLE / bit-packing hybrid, parquet_levels.h) and their values
// (PLAIN, or dictionary indices into the dictionary page: PLAIN_DICTIONARY / RLE_DICTIONARY)
// turned into views. A value points into the memory map (pages stored uncompressed) or into a
// decompressed page the chunk keeps; nothing is copied or allocated per value beyond the
// arrays' amortized growth.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "data/parquet_codec.h"
#include "data/parquet_file.h"

namespace quill {

struct ByteArrayChunk {
  // One entry per level (num_values of the chunk): the repetition and definition levels (0 when
  // the leaf's maximum is 0).
  std::vector<uint8_t> rep, def;
  // The non-null values in order: one per level whose definition level is the leaf's maximum.
  std::vector<std::string_view> values;
  // Decompressed pages the values point into.
  std::vector<std::unique_ptr<char[]>> buffers;
  int pages_v1 = 0, pages_v2 = 0;  // data pages read, of each version
  int plain_pages = 0;             // data pages of PLAIN values (the others index the dictionary)
  bool dictionary = false;  // whether the chunk had a dictionary page
};

// Reads `leaf`'s chunk in row group g of `file`; the leaf must be BYTE_ARRAY. Thread-safe for
// different decompressors. Errors name the file, row group, column and (where it applies) the
// page: a page that does not fit the chunk, does not decompress, an unsupported codec or
// encoding, levels or values that end early, a dictionary index out of range, more or fewer
// values than the metadata says.
ByteArrayChunk read_byte_array_chunk(const ParquetFile& file, size_t g, const ParquetLeaf& leaf,
                                     PageDecompressor& decompressor);

}  // namespace quill
