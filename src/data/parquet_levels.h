// Parquet's RLE / bit-packing hybrid (parquet-format Encodings.md, "Run Length Encoding /
// Bit-Packing Hybrid"): how data pages store repetition and definition levels and dictionary
// indices. The data is a run of runs, each starting with a ULEB128 header h:
//   h & 1 == 0   an RLE run: h >> 1 copies of one value stored in ceil(bit_width / 8) bytes,
//                little-endian;
//   h & 1 == 1   a bit-packed run: (h >> 1) groups of 8 values, bit_width bits each, packed from
//                the least significant bit of each byte up (the last group may hold padding).
// Data page v1 prefixes the levels with their byte length (4 bytes, little-endian); data page
// v2 gives the lengths in its header instead; dictionary indices are preceded by one byte, the
// bit width. Bit width 0 stores nothing per value (every value is 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace quill {

class RleBitPackedDecoder {
 public:
  // `data`: exactly the encoded runs; bit_width in 0..32. Errors start with `what`.
  RleBitPackedDecoder(std::string_view data, int bit_width, std::string what);

  // Writes the next n values to out[0..n); an error if the runs end first or a value does not
  // fit T. Can be called repeatedly (a run may continue across calls).
  template <typename T>
  void decode(T* out, size_t n);

  // Bytes of `data` consumed so far (whole runs).
  size_t consumed() const { return pos_; }

 private:
  void next_run();
  [[noreturn]] void fail(std::string_view problem) const;

  std::string_view data_;
  int bit_width_;
  std::string what_;
  size_t pos_ = 0;
  // The current run: an RLE run's value and what is left of it, or a bit-packed run's next
  // byte (bit_pos_ within it, in bits from data_[packed_at_]) and values left.
  uint64_t rle_left_ = 0;
  uint32_t rle_value_ = 0;
  uint64_t packed_left_ = 0;
  size_t packed_at_ = 0;
  uint64_t bit_pos_ = 0;
};

// Levels of a data page (v1: `data` starts with the 4-byte length and `consumed` gets that
// length plus 4; v2: `data` is exactly the levels). max_level 0: nothing is stored and every
// level is 0. Errors start with `what`.
void decode_levels_v1(std::string_view data, int max_level, size_t n, uint8_t* out, const std::string& what,
                      size_t& consumed);
void decode_levels_v2(std::string_view data, int max_level, size_t n, uint8_t* out, const std::string& what);

// The bit width of levels 0..max_level: ceil(log2(max_level + 1)).
int level_bit_width(int max_level);

}  // namespace quill
