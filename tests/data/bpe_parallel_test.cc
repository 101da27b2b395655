// encode_parallel and the per-thread cache sizes never change the ids: any thread count (1, 2, 3,
// 7, 16), chunk size and cache size gives encode()'s ids, on a random vocabulary with the o200k
// pattern (runs without the o200k ranks; bpe_o200k_test.cc repeats this on the real one). Also the
// checks of the QUILL_BPE_* cache-size variables.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "base/rng.h"
#include "data/bpe_tokenizer.h"
#include "data_test_util.h"

namespace quill {
namespace {

using test::expect_error;

std::string random_text(SplitMix64& rng, size_t bytes) {
  const std::vector<std::string> parts = {"a", "b", "e", "t", "1", "T", " ", "  ", "\n", "\n\n", ".", "tea", " bet",
                                          "\xC3\xA9", "\xE4\xB8\xAD", "\r\n", "  \n", "12345"};
  std::string t;
  while (t.size() < bytes) t += parts[rng.below(parts.size())];
  return t;
}

class BpeParallel : public ::testing::Test {
 protected:
  void SetUp() override {
    write_file_atomic(tmp_.sub("r.tiktoken"), test::random_ranks(11));
    tok_ = BpeTokenizer::from_tiktoken(tmp_.sub("r.tiktoken"), {});
  }
  test::TempDir tmp_;
  std::unique_ptr<BpeTokenizer> tok_;
};

TEST_F(BpeParallel, AnyThreadCountAndChunkSizeGivesTheSerialIds) {
  SplitMix64 rng(5);
  std::vector<uint32_t> out = {7, 7, 7};  // reused throughout: stale contents of every size
  for (size_t bytes : {0u, 1u, 40u, 3000u, 70000u, 300000u}) {
    std::string text = random_text(rng, bytes);
    if (bytes == 3000) text += "\xFF\xFE bad \xC3";  // ill-formed UTF-8: each chunk sanitizes itself
    const std::vector<uint32_t> serial = tok_->encode(text);
    for (int threads : {1, 2, 3, 7, 16}) {
      for (size_t chunk : {0u, 1u, 3u, 64u, 1000u}) {
        ParallelEncodeStats stats;
        ParallelEncodeOptions options;
        options.threads = threads;
        options.chunk_bytes = chunk;
        options.stats = &stats;
        tok_->encode_parallel(text, options, out);
        ASSERT_EQ(out, serial) << bytes << " bytes, " << threads << " threads, chunk " << chunk;
        if (threads > 1 && chunk == 64 && bytes >= 3000) {
          EXPECT_EQ(stats.threads, threads);
          EXPECT_GT(stats.chunks, 1u);
          EXPECT_EQ(stats.chunk_bytes, 64u);
          EXPECT_GE(stats.seconds, stats.encode_seconds);
        }
      }
      EXPECT_EQ(tok_->encode_parallel(text, threads), serial) << bytes << " bytes, " << threads << " threads (new vector)";
    }
  }
}

TEST_F(BpeParallel, CacheSizesDoNotChangeTheIds) {
  SplitMix64 rng(9);
  const std::string text = random_text(rng, 200000);
  const std::vector<uint32_t> want = tok_->encode(text);
  BpeCacheSizes tiny{1, 1, 16}, small{256, 64, 32}, large{1u << 18, 1u << 20, 1u << 16};
  for (const BpeCacheSizes& sizes : {tiny, small, large, BpeCacheSizes{}}) {
    tok_->set_cache_sizes(sizes);
    EXPECT_EQ(tok_->core().cache_sizes(), sizes);
    for (int threads : {1, 3, 16}) {
      ParallelEncodeOptions options;
      options.threads = threads;
      options.chunk_bytes = 4096;
      std::vector<uint32_t> out;
      tok_->encode_parallel(text, options, out);
      EXPECT_EQ(out, want) << sizes.front_entries << "/" << sizes.pair_slots << "/" << sizes.piece_slots << ", "
                           << threads << " threads";
    }
  }
}

TEST(BpeCacheSizes, DefaultsAndVariables) {
  BpeCacheSizes d;
  EXPECT_EQ(d.front_entries, 65536u);
  EXPECT_EQ(d.pair_slots, 65536u);
  EXPECT_EQ(d.piece_slots, 16384u);
  std::map<std::string, std::string> vars;
  auto lookup = [&](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  };
  EXPECT_EQ(BpeCacheSizes::from_variables(lookup), d);
  vars = {{"QUILL_BPE_FRONT_ENTRIES", "4096"}, {"QUILL_BPE_PAIR_SLOTS", "1"}, {"QUILL_BPE_PIECE_SLOTS", ""}};
  EXPECT_EQ(BpeCacheSizes::from_variables(lookup), (BpeCacheSizes{4096, 1, 16384}));
  for (const char* bad : {"1000", "0", "abc", "-4", "8388608", "99999999999"}) {
    vars = {{"QUILL_BPE_FRONT_ENTRIES", bad}};
    expect_error([&] { BpeCacheSizes::from_variables(lookup); }, {"QUILL_BPE_FRONT_ENTRIES"});
  }
  vars = {{"QUILL_BPE_PIECE_SLOTS", "8"}};
  expect_error([&] { BpeCacheSizes::from_variables(lookup); }, {"QUILL_BPE_PIECE_SLOTS is 8", "power of two from 16"});
  vars = {{"QUILL_BPE_PAIR_SLOTS", "3"}};
  expect_error([&] { BpeCacheSizes::from_variables(lookup); }, {"QUILL_BPE_PAIR_SLOTS is 3"});
}

TEST_F(BpeParallel, SetCacheSizesRefusesBadSizes) {
  expect_error([&] { tok_->set_cache_sizes(BpeCacheSizes{100, 1, 16}); }, {"QUILL_BPE_FRONT_ENTRIES is 100"});
  EXPECT_EQ(tok_->core().cache_sizes(), BpeCacheSizes::from_env());  // unchanged
}

}  // namespace
}  // namespace quill
