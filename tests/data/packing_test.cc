// Packing: the documented Fisher-Yates order, concatenation, dropped tail, skipped rows, max_rows.
#include <gtest/gtest.h>

#include "base/rng.h"
#include "data/packing.h"
#include "data_test_util.h"

namespace quill {
namespace {

using test::expect_error;
using test::TempDir;

// Hand-computed for seed 42, n = 5. SplitMix64(42) gives
//   0xbdd732262feb6e95, 0x28efe333b266f103, 0x47526757130f9f52, 0x581ce1ff0e4ae394, ...
// below(b) = high 64 bits of x * b (no rejection happens here):
//   i=4: below(5) = floor(0.7416 * 5) = 3   swap(4,3): [0 1 2 4 3]
//   i=3: below(4) = floor(0.1599 * 4) = 0   swap(3,0): [4 1 2 0 3]
//   i=2: below(3) = floor(0.2786 * 3) = 0   swap(2,0): [2 1 4 0 3]
//   i=1: below(2) = floor(0.3442 * 2) = 0   swap(1,0): [1 2 4 0 3]
TEST(Packing, FisherYatesSeed42) {
  SplitMix64 rng(42);
  EXPECT_EQ(rng.next(), 0xbdd732262feb6e95ull);
  EXPECT_EQ(rng.next(), 0x28efe333b266f103ull);
  SplitMix64 draws(42);
  EXPECT_EQ(draws.below(5), 3u);
  EXPECT_EQ(draws.below(4), 0u);
  EXPECT_EQ(draws.below(3), 0u);
  EXPECT_EQ(draws.below(2), 0u);
  EXPECT_EQ(fisher_yates_permutation(5, 42), (std::vector<int64_t>{1, 2, 4, 0, 3}));
  EXPECT_TRUE(fisher_yates_permutation(0, 42).empty());
  EXPECT_EQ(fisher_yates_permutation(1, 42), (std::vector<int64_t>{0}));
}

TEST(Packing, PermutationIsAPermutation) {
  std::vector<int64_t> p = fisher_yates_permutation(1000, 7);
  std::vector<int64_t> sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 1000; ++i) ASSERT_EQ(sorted[i], i);
  EXPECT_NE(p, fisher_yates_permutation(1000, 8));
}

// Conversation i of length len: tokens 100*i + k, every mask bit 1.
MaskedTokens conv(uint32_t i, size_t len) {
  MaskedTokens c;
  for (size_t k = 0; k < len; ++k) {
    c.tokens.push_back(100 * i + static_cast<uint32_t>(k));
    c.mask.push_back(1);
  }
  return c;
}

std::vector<std::vector<uint32_t>> read_rows(const std::string& dir) {
  RowsReader r = RowsReader::open(dir, true);
  std::vector<std::vector<uint32_t>> rows;
  for (int64_t i = 0; i < r.rows(); ++i) rows.emplace_back(r.tokens(i), r.tokens(i) + r.row_tokens());
  return rows;
}

TEST(Packing, ConcatenatesInPermutedOrderAndDropsTheTail) {
  // Lengths 3, 4, 2, 5, 3 (17 tokens), taken in the order [1 2 4 0 3] (FisherYatesSeed42).
  std::vector<MaskedTokens> convs = {conv(0, 3), conv(1, 4), conv(2, 2), conv(3, 5), conv(4, 3)};
  TempDir tmp;
  nlohmann::json m = write_packed_rows(tmp.str(), convs, {42, 4, -1}, {{"source", "test"}});
  // Stream: c1 100,101,102,103 | c2 200,201 | c4 400,401,402 | c0 0,1,2 | c3 300..304
  std::vector<std::vector<uint32_t>> want = {
      {100, 101, 102, 103}, {200, 201, 400, 401}, {402, 0, 1, 2}, {300, 301, 302, 303}};
  EXPECT_EQ(read_rows(tmp.str()), want);  // 304 is the dropped tail
  EXPECT_EQ(m["rows"], 4);
  EXPECT_EQ(m["seed"], 42);
  EXPECT_EQ(m["source"], "test");
  EXPECT_EQ(m["packing"]["tail_tokens_dropped"], 1);
  EXPECT_EQ(m["packing"]["stream_tokens"], 17);
  EXPECT_EQ(m["packing"]["stopped_at_max_rows"], false);
  EXPECT_EQ(m["conversations"]["input"], 5);
  EXPECT_EQ(m["conversations"]["used"], 5);  // c3 is used: 4 of its 5 tokens are in a row
  EXPECT_EQ(m["conversations"]["skipped"], 0);
  // Every row has 3 targets (positions 1..3), 16 tokens in all.
  EXPECT_DOUBLE_EQ(m["supervised_token_ratio"].get<double>(), 12.0 / 16.0);
}

TEST(Packing, SkipsRowsWithoutASupervisedTarget) {
  // One conversation (the order is trivial), rows of 4 tokens:
  //   row 0 mask 1 0 0 0  -> its only 1 is at position 0, which is no target: skipped
  //   row 1 mask 0 0 1 0  -> one target: kept
  //   row 2 mask 0 0 0 0  -> skipped
  MaskedTokens c = conv(0, 12);
  c.mask = {1, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0};
  TempDir tmp;
  nlohmann::json m = write_packed_rows(tmp.str(), {c}, {42, 4, -1}, nlohmann::json::object());
  EXPECT_EQ(read_rows(tmp.str()), (std::vector<std::vector<uint32_t>>{{4, 5, 6, 7}}));
  EXPECT_EQ(m["packing"]["rows_without_target_skipped"], 2);
  EXPECT_EQ(m["packing"]["tail_tokens_dropped"], 0);
  EXPECT_EQ(m["supervised_targets"], 1);
}

TEST(Packing, HonoursMaxRows) {
  std::vector<MaskedTokens> convs = {conv(0, 3), conv(1, 4), conv(2, 2), conv(3, 5), conv(4, 3)};
  TempDir tmp;
  nlohmann::json m = write_packed_rows(tmp.str(), convs, {42, 4, 2}, nlohmann::json::object());
  EXPECT_EQ(read_rows(tmp.str()), (std::vector<std::vector<uint32_t>>{{100, 101, 102, 103}, {200, 201, 400, 401}}));
  EXPECT_EQ(m["packing"]["stopped_at_max_rows"], true);
  EXPECT_EQ(m["max_rows"], 2);
  EXPECT_EQ(m["conversations"]["used"], 3);  // c1, c2, c4
  EXPECT_EQ(m["conversations"]["skipped"], 2);
}

TEST(Packing, ConversationOnlyInSkippedRowsCountsAsSkipped) {
  // Whichever conversation comes first fills row 0 alone; give it no supervised token.
  std::vector<int64_t> order = fisher_yates_permutation(2, 42);
  std::vector<MaskedTokens> convs = {conv(0, 4), conv(1, 4)};
  convs[order[0]].mask = {0, 0, 0, 0};  // the first row: no target
  TempDir tmp;
  nlohmann::json m = write_packed_rows(tmp.str(), convs, {42, 4, -1}, nlohmann::json::object());
  EXPECT_EQ(m["rows"], 1);
  EXPECT_EQ(m["conversations"]["used"], 1);
  EXPECT_EQ(m["conversations"]["skipped"], 1);
}

TEST(Packing, Errors) {
  TempDir tmp;
  std::vector<MaskedTokens> few = {conv(0, 3)};
  expect_error([&] { write_packed_rows(tmp.sub("a"), few, {42, 4, -1}, nlohmann::json::object()); },
               {"no rows", "3 tokens"});
  expect_error([&] { write_packed_rows(tmp.sub("b"), few, {42, 2, 0}, nlohmann::json::object()); }, {"max_rows 0"});
  MaskedTokens bad = conv(0, 3);
  bad.mask.pop_back();
  expect_error([&] { write_packed_rows(tmp.sub("c"), {bad}, {42, 2, -1}, nlohmann::json::object()); },
               {"conversation 0", "mask"});
  // A failed build leaves no rows directory content behind.
  EXPECT_FALSE(std::filesystem::exists(tmp.sub("a") + "/rows.bin"));
  EXPECT_FALSE(std::filesystem::exists(tmp.sub("a") + "/manifest.json"));
}

TEST(Packing, Deterministic) {
  std::vector<MaskedTokens> convs;
  for (uint32_t i = 0; i < 50; ++i) convs.push_back(conv(i, 3 + i % 7));
  TempDir a, b;
  nlohmann::json ma = write_packed_rows(a.str(), convs, {9, 8, -1}, nlohmann::json::object());
  nlohmann::json mb = write_packed_rows(b.str(), convs, {9, 8, -1}, nlohmann::json::object());
  EXPECT_EQ(ma, mb);
  nlohmann::json mc = write_packed_rows(b.sub("c"), convs, {10, 8, -1}, nlohmann::json::object());
  EXPECT_NE(ma["rows_sha256"], mc["rows_sha256"]);
}

}  // namespace
}  // namespace quill
