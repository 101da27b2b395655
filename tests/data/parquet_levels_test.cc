// The RLE / bit-packing hybrid decoder (src/data/parquet_levels.h): RLE runs, bit-packed runs
// (the format spec's own example), bit widths 0 to 32, runs continued across calls, the v1 and
// v2 level framings, and errors.
#include "data/parquet_levels.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "data_test_util.h"

namespace quill {
namespace {

using test::expect_error;

std::string bytes(std::initializer_list<int> b) {
  std::string s;
  for (int x : b) s += static_cast<char>(x);
  return s;
}

// An independent encoder for the tests: values as bit-packed groups of 8, LSB first.
std::string bit_pack(const std::vector<uint32_t>& values, int width) {
  std::string out;
  size_t groups = (values.size() + 7) / 8;
  size_t h = (groups << 1) | 1;
  while (h >= 0x80) {
    out += static_cast<char>((h & 0x7F) | 0x80);
    h >>= 7;
  }
  out += static_cast<char>(h);
  std::vector<uint8_t> packed(groups * static_cast<size_t>(width), 0);
  for (size_t i = 0; i < values.size(); ++i) {
    for (int b = 0; b < width; ++b) {
      if ((values[i] >> b) & 1) {
        size_t bit = i * static_cast<size_t>(width) + static_cast<size_t>(b);
        packed[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
      }
    }
  }
  out.append(packed.begin(), packed.end());
  return out;
}

std::string rle_run(uint32_t value, size_t count, int width) {
  std::string out;
  size_t h = count << 1;
  while (h >= 0x80) {
    out += static_cast<char>((h & 0x7F) | 0x80);
    h >>= 7;
  }
  out += static_cast<char>(h);
  for (int b = 0; b < (width + 7) / 8; ++b) out += static_cast<char>((value >> (8 * b)) & 0xFF);
  return out;
}

template <typename T>
std::vector<T> decode(const std::string& data, int width, size_t n) {
  std::vector<T> out(n);
  RleBitPackedDecoder d(data, width, "t");
  d.decode(out.data(), n);
  return out;
}

TEST(ParquetLevels, SpecBitPackedExample) {
  // Encodings.md: the numbers 0..7 with bit width 3 pack into 10001000 11000110 11111010.
  std::string data = bytes({0x03, 0x88, 0xC6, 0xFA});  // header: 1 group, bit-packed
  EXPECT_EQ(decode<uint8_t>(data, 3, 8), (std::vector<uint8_t>{0, 1, 2, 3, 4, 5, 6, 7}));
  EXPECT_EQ(bit_pack({0, 1, 2, 3, 4, 5, 6, 7}, 3), data);  // the test's encoder agrees
}

TEST(ParquetLevels, RleRuns) {
  // 300 ones then 5 twos, bit width 2: the first header needs two varint bytes.
  std::string data = rle_run(1, 300, 2) + rle_run(2, 5, 2);
  EXPECT_EQ(data.substr(0, 3), bytes({0xD8, 0x04, 0x01}));
  std::vector<uint8_t> v = decode<uint8_t>(data, 2, 305);
  for (size_t i = 0; i < 305; ++i) EXPECT_EQ(v[i], i < 300 ? 1 : 2) << i;
  // A run longer than what is asked for is fine (the rest is never read).
  EXPECT_EQ(decode<uint8_t>(rle_run(3, 100, 2), 2, 4), (std::vector<uint8_t>{3, 3, 3, 3}));
}

TEST(ParquetLevels, BitWidthZero) {
  // Width 0: RLE values take no bytes, bit-packed groups take none either.
  std::string data = rle_run(0, 7, 0) + bit_pack(std::vector<uint32_t>(16, 0), 0);
  EXPECT_EQ(data.size(), 2u);
  EXPECT_EQ(decode<uint8_t>(data, 0, 23), std::vector<uint8_t>(23, 0));
}

TEST(ParquetLevels, EveryBitWidthMixedRuns) {
  std::mt19937 rng(7);
  for (int width : {1, 2, 3, 4, 5, 7, 8, 9, 13, 16, 17, 24, 31, 32}) {
    uint64_t max = width == 32 ? 0xFFFFFFFFull : (1ull << width) - 1;
    std::vector<uint32_t> expect;
    std::string data;
    for (int run = 0; run < 6; ++run) {
      if (run % 2 == 0) {
        uint32_t v = static_cast<uint32_t>(rng() % (max + 1));
        size_t count = 1 + rng() % 40;
        data += rle_run(v, count, width);
        expect.insert(expect.end(), count, v);
      } else {
        std::vector<uint32_t> group(8 * (1 + rng() % 3));
        for (uint32_t& g : group) g = static_cast<uint32_t>(rng() % (max + 1));
        data += bit_pack(group, width);
        expect.insert(expect.end(), group.begin(), group.end());
      }
    }
    EXPECT_EQ(decode<uint32_t>(data, width, expect.size()), expect) << "width " << width;
    // The same decoded in pieces of 5: runs continue across calls.
    RleBitPackedDecoder d(data, width, "t");
    std::vector<uint32_t> pieces(expect.size());
    for (size_t at = 0; at < expect.size(); at += 5) d.decode(pieces.data() + at, std::min<size_t>(5, expect.size() - at));
    EXPECT_EQ(pieces, expect) << "width " << width;
    EXPECT_EQ(d.consumed(), data.size());
  }
}

TEST(ParquetLevels, PaddedLastGroup) {
  // 11 values bit-packed as 2 groups: the last 5 slots are padding, never returned.
  std::string data = bit_pack({1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1}, 1);
  EXPECT_EQ(decode<uint8_t>(data, 1, 11), (std::vector<uint8_t>{1, 0, 1, 1, 0, 0, 1, 0, 1, 1, 1}));
}

TEST(ParquetLevels, V1LengthPrefixAndV2) {
  std::string runs = rle_run(1, 3, 1) + bit_pack({0, 1, 0, 1, 0, 1, 0, 1}, 1);
  std::string v1 = bytes({static_cast<int>(runs.size()), 0, 0, 0}) + runs + "values";
  std::vector<uint8_t> out(11);
  size_t used = 0;
  decode_levels_v1(v1, 1, 11, out.data(), "t", used);
  EXPECT_EQ(used, 4 + runs.size());
  EXPECT_EQ(out, (std::vector<uint8_t>{1, 1, 1, 0, 1, 0, 1, 0, 1, 0, 1}));
  std::vector<uint8_t> out2(11);
  decode_levels_v2(runs, 1, 11, out2.data(), "t");
  EXPECT_EQ(out2, out);
  // Max level 0: nothing is stored, every level is 0.
  std::vector<uint8_t> zeros(4, 9);
  decode_levels_v1("", 0, 4, zeros.data(), "t", used);
  EXPECT_EQ(used, 0u);
  EXPECT_EQ(zeros, std::vector<uint8_t>(4, 0));
  EXPECT_EQ(level_bit_width(0), 0);
  EXPECT_EQ(level_bit_width(1), 1);
  EXPECT_EQ(level_bit_width(2), 2);
  EXPECT_EQ(level_bit_width(3), 2);
  EXPECT_EQ(level_bit_width(4), 3);
  EXPECT_EQ(level_bit_width(255), 8);
}

TEST(ParquetLevels, Errors) {
  std::vector<uint8_t> out(16);
  // The runs end before the values.
  expect_error([&] { RleBitPackedDecoder(rle_run(1, 3, 1), 1, "f: levels").decode(out.data(), 4); },
               {"f: levels: corrupt RLE/bit-packed data (the runs end before the values do"});
  // A bit-packed run whose bytes are cut off.
  std::string cut = bit_pack({1, 2, 3, 4, 5, 6, 7, 0}, 3);
  cut.pop_back();
  expect_error([&] { RleBitPackedDecoder(cut, 3, "t").decode(out.data(), 8); },
               {"a bit-packed run of 8 values needs 3 bytes, 2 left"});
  // An RLE value wider than the bit width.
  expect_error([&] { RleBitPackedDecoder(rle_run(5, 2, 2), 2, "t").decode(out.data(), 2); },
               {"an RLE value 5 wider than 2 bits"});
  // A v1 length longer than the page.
  expect_error(
      [&] {
        size_t used;
        decode_levels_v1(bytes({100, 0, 0, 0, 0x02, 0x01}), 1, 1, out.data(), "f: page 2, definition levels", used);
      },
      {"f: page 2, definition levels: levels of 100 bytes, but only 2 left in the page"});
  // A level above the maximum (width 2 holds 3, the schema allows 2).
  expect_error([&] { decode_levels_v2(rle_run(3, 1, 2), 2, 1, out.data(), "t"); }, {"level 3 above the maximum 2"});
  // A value that does not fit the output type.
  std::vector<uint8_t> small(1);
  expect_error([&] { RleBitPackedDecoder(rle_run(300, 1, 9), 9, "t").decode(small.data(), 1); },
               {"a value 300 too large here"});
  expect_error([&] { RleBitPackedDecoder("", 33, "t"); }, {"bit width 33"});
}

}  // namespace
}  // namespace quill
