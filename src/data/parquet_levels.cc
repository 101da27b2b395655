#include "data/parquet_levels.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "base/error.h"

namespace quill {

// Parquet stores lengths little-endian; they are read with memcpy.
static_assert(std::endian::native == std::endian::little, "the Parquet reader assumes a little-endian machine");

RleBitPackedDecoder::RleBitPackedDecoder(std::string_view data, int bit_width, std::string what)
    : data_(data), bit_width_(bit_width), what_(std::move(what)) {
  QUILL_CHECK(bit_width >= 0 && bit_width <= 32, "{}: bit width {} (expected 0..32)", what_, bit_width);
}

void RleBitPackedDecoder::fail(std::string_view problem) const {
  QUILL_FAIL("{}: corrupt RLE/bit-packed data ({} at byte {} of {})", what_, problem, pos_, data_.size());
}

void RleBitPackedDecoder::next_run() {
  uint64_t h = 0;
  for (int shift = 0;; shift += 7) {
    if (pos_ >= data_.size()) fail("the runs end before the values do");
    if (shift > 63) fail("a run header longer than 64 bits");
    uint8_t b = static_cast<uint8_t>(data_[pos_++]);
    h |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) break;
  }
  if (h & 1) {
    uint64_t groups = h >> 1;
    // A header with zero groups is legal and empty; its bytes are 0.
    uint64_t bytes = groups * static_cast<uint64_t>(bit_width_);
    if (groups > (uint64_t{1} << 40) || bytes > data_.size() - pos_) {
      fail(fmt::format("a bit-packed run of {} values needs {} bytes, {} left", groups * 8, bytes, data_.size() - pos_));
    }
    packed_left_ = groups * 8;
    packed_at_ = pos_;
    bit_pos_ = 0;
    pos_ += bytes;
  } else {
    rle_left_ = h >> 1;
    size_t bytes = (static_cast<size_t>(bit_width_) + 7) / 8;
    if (bytes > data_.size() - pos_) fail("an RLE run's value is cut off");
    uint32_t v = 0;
    for (size_t b = 0; b < bytes; ++b) v |= static_cast<uint32_t>(static_cast<uint8_t>(data_[pos_ + b])) << (8 * b);
    if (bit_width_ < 32 && (v >> bit_width_) != 0) fail(fmt::format("an RLE value {} wider than {} bits", v, bit_width_));
    rle_value_ = v;
    pos_ += bytes;
  }
}

template <typename T>
void RleBitPackedDecoder::decode(T* out, size_t n) {
  const uint64_t mask = bit_width_ == 32 ? 0xFFFFFFFFull : (uint64_t{1} << bit_width_) - 1;
  const uint64_t type_max = static_cast<uint64_t>(static_cast<T>(~T{0}));
  const uint8_t* base = reinterpret_cast<const uint8_t*>(data_.data());
  size_t done = 0;
  while (done < n) {
    if (rle_left_ > 0) {
      if (rle_value_ > type_max) fail(fmt::format("a value {} too large here", rle_value_));
      size_t k = static_cast<size_t>(std::min<uint64_t>(rle_left_, n - done));
      std::fill(out + done, out + done + k, static_cast<T>(rle_value_));
      rle_left_ -= k;
      done += k;
    } else if (packed_left_ > 0) {
      size_t k = static_cast<size_t>(std::min<uint64_t>(packed_left_, n - done));
      const uint8_t* p = base + packed_at_;
      for (size_t i = 0; i < k; ++i) {
        // A value spans at most 5 bytes (32 bits at a bit offset up to 7); the run's bytes were
        // checked to be there when it began, and no byte past the value is read.
        size_t byte = static_cast<size_t>(bit_pos_ >> 3);
        int shift = static_cast<int>(bit_pos_ & 7);
        int nbytes = (shift + bit_width_ + 7) / 8;
        uint64_t acc = 0;
        for (int b = 0; b < nbytes; ++b) acc |= static_cast<uint64_t>(p[byte + b]) << (8 * b);
        uint64_t v = (acc >> shift) & mask;
        if (v > type_max) fail(fmt::format("a value {} too large here", v));
        out[done + i] = static_cast<T>(v);
        bit_pos_ += static_cast<uint64_t>(bit_width_);
      }
      packed_left_ -= k;
      done += k;
    } else {
      next_run();
    }
  }
}

template void RleBitPackedDecoder::decode<uint8_t>(uint8_t*, size_t);
template void RleBitPackedDecoder::decode<uint32_t>(uint32_t*, size_t);

int level_bit_width(int max_level) {
  int w = 0;
  while ((1 << w) <= max_level) ++w;
  return w;
}

namespace {

void decode_levels(std::string_view data, int max_level, size_t n, uint8_t* out, const std::string& what) {
  QUILL_CHECK(max_level >= 0 && max_level <= 255, "{}: a maximum level of {} (quill reads up to 255)", what, max_level);
  RleBitPackedDecoder d(data, level_bit_width(max_level), what);
  d.decode(out, n);
  // A level above the schema's maximum cannot be interpreted; only corruption gives one.
  for (size_t i = 0; i < n; ++i) {
    QUILL_CHECK(out[i] <= max_level, "{}: level {} above the maximum {} (value {})", what, out[i], max_level, i);
  }
}

}  // namespace

void decode_levels_v1(std::string_view data, int max_level, size_t n, uint8_t* out, const std::string& what,
                      size_t& consumed) {
  if (max_level == 0) {
    std::fill(out, out + n, uint8_t{0});
    consumed = 0;
    return;
  }
  QUILL_CHECK(data.size() >= 4, "{}: the levels' 4-byte length is cut off ({} bytes left)", what, data.size());
  uint32_t len;
  std::memcpy(&len, data.data(), 4);
  QUILL_CHECK(len <= data.size() - 4, "{}: levels of {} bytes, but only {} left in the page", what, len, data.size() - 4);
  decode_levels(data.substr(4, len), max_level, n, out, what);
  consumed = 4 + static_cast<size_t>(len);
}

void decode_levels_v2(std::string_view data, int max_level, size_t n, uint8_t* out, const std::string& what) {
  if (max_level == 0) {
    std::fill(out, out + n, uint8_t{0});
    return;
  }
  decode_levels(data, max_level, n, out, what);
}

}  // namespace quill
