// Page decompression for the Parquet reader: the codecs of parquet-format's Compression.md that
// quill reads, UNCOMPRESSED, SNAPPY (Snappy's raw block format, Debian's libsnappy) and ZSTD
// (Zstandard frames, RFC 8878, Debian's libzstd). Other codecs are refused by name.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "data/parquet_metadata.h"

typedef struct ZSTD_DCtx_s ZSTD_DCtx;

namespace quill {

// Whether the reader can decompress `codec`.
bool parquet_codec_supported(ParquetCodec codec);

// One per thread (a zstd decompression context is reused from page to page).
class PageDecompressor {
 public:
  PageDecompressor();
  ~PageDecompressor();
  PageDecompressor(const PageDecompressor&) = delete;
  PageDecompressor& operator=(const PageDecompressor&) = delete;

  // Decompresses `src` into dst[0..uncompressed_size); an error starting with `what` when the
  // data is corrupt or does not decompress to exactly uncompressed_size bytes. Not for
  // UNCOMPRESSED (the caller reads those pages in place).
  void decompress(ParquetCodec codec, std::string_view src, char* dst, size_t uncompressed_size,
                  const std::string& what);

 private:
  ZSTD_DCtx* zstd_ = nullptr;
};

}  // namespace quill
