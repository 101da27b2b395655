#include "data/parquet_codec.h"

#include <snappy.h>
#include <zstd.h>

#include "base/error.h"

namespace quill {

bool parquet_codec_supported(ParquetCodec codec) {
  return codec == ParquetCodec::kUncompressed || codec == ParquetCodec::kSnappy || codec == ParquetCodec::kZstd;
}

PageDecompressor::PageDecompressor() = default;

PageDecompressor::~PageDecompressor() {
  if (zstd_) ZSTD_freeDCtx(zstd_);
}

void PageDecompressor::decompress(ParquetCodec codec, std::string_view src, char* dst, size_t uncompressed_size,
                                  const std::string& what) {
  switch (codec) {
    case ParquetCodec::kSnappy: {
      size_t n = 0;
      QUILL_CHECK(snappy::GetUncompressedLength(src.data(), src.size(), &n),
                  "{}: the page does not decompress (SNAPPY: corrupt header)", what);
      QUILL_CHECK(n == uncompressed_size, "{}: the page decompresses (SNAPPY) to {} bytes, its header says {}", what,
                  n, uncompressed_size);
      QUILL_CHECK(snappy::RawUncompress(src.data(), src.size(), dst),
                  "{}: the page does not decompress (SNAPPY: corrupt data)", what);
      return;
    }
    case ParquetCodec::kZstd: {
      if (!zstd_) {
        zstd_ = ZSTD_createDCtx();
        QUILL_CHECK(zstd_ != nullptr, "{}: cannot create a zstd context (out of memory)", what);
      }
      size_t n = ZSTD_decompressDCtx(zstd_, dst, uncompressed_size, src.data(), src.size());
      QUILL_CHECK(!ZSTD_isError(n), "{}: the page does not decompress (ZSTD: {})", what, ZSTD_getErrorName(n));
      QUILL_CHECK(n == uncompressed_size, "{}: the page decompresses (ZSTD) to {} bytes, its header says {}", what, n,
                  uncompressed_size);
      return;
    }
    default:
      QUILL_FAIL("{}: codec {} is not supported (quill reads UNCOMPRESSED, SNAPPY and ZSTD)", what,
                 parquet_codec_name(codec));
  }
}

}  // namespace quill
