// Exactness against tiktoken's o200k_base: the 1.1 MB mixed corpus and the ill-formed UTF-8
// sample (tests/data/fixtures/tokenizer, made by tools/tokenizer/make_corpus.py) encode to the ids
// tiktoken gave (tools/tokenizer/make_golden_ids.py, run where tiktoken is installed). Needs the
// o200k_base ranks (scripts/fetch-o200k.sh); skips, saying so, without them.
#include <gtest/gtest.h>

#include <cstring>

#include "base/file_util.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer_loader.h"
#include "data/utf8.h"
#include "data_test_util.h"
#include "o200k_test_util.h"

namespace quill {
namespace {

class O200k : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    std::string ranks = test::find_o200k_ranks();
    if (!ranks.empty()) tok_ = BpeTokenizer::from_tiktoken(ranks, special_token_set("o200k")).release();
  }
  static void TearDownTestSuite() {
    delete tok_;
    tok_ = nullptr;
  }
  void SetUp() override {
    if (tok_ == nullptr) GTEST_SKIP() << test::kNoO200kRanks;
  }
  static BpeTokenizer* tok_;
};
BpeTokenizer* O200k::tok_ = nullptr;

void expect_golden(const BpeTokenizer& tok, const std::string& input_name) {
  std::string input = test::tokenizer_fixture(input_name), golden = input + ".o200k_ids";
  if (!path_exists(golden)) {
    GTEST_SKIP() << golden << " is missing: generate it with tools/tokenizer/make_golden_ids.py where tiktoken is "
                 << "installed (docs/tokenizer.md)";
  }
  std::string text = read_file(input);
  test::Golden g = test::read_golden(golden);
  ASSERT_EQ(g.input_sha256, sha256_hex(text)) << golden << " was made from another " << input_name;
  std::vector<uint32_t> got = tok.encode(text);
  size_t n = std::min(got.size(), g.ids.size()), first = n;
  for (size_t i = 0; i < n; ++i) {
    if (got[i] != g.ids[i]) {
      first = i;
      break;
    }
  }
  if (first < n || got.size() != g.ids.size()) {
    size_t lo = first >= 8 ? first - 8 : 0, hi = std::min(n, first + 8);
    std::vector<uint32_t> want_ctx(g.ids.begin() + lo, g.ids.begin() + hi), got_ctx(got.begin() + lo, got.begin() + hi);
    ADD_FAILURE() << input_name << ": " << got.size() << " ids, tiktoken gave " << g.ids.size() << "; first difference at id "
                  << first << "\n tiktoken decodes to: [" << sanitize_utf8(tok.decode(want_ctx)) << "]\n quill decodes to:    ["
                  << sanitize_utf8(tok.decode(got_ctx)) << "]";
  }
}

TEST_F(O200k, KnownIds) {
  EXPECT_EQ(tok_->encode("Hello world"), (std::vector<uint32_t>{13225, 2375}));
  EXPECT_EQ(tok_->vocab_size(), 200019);
  EXPECT_EQ(tok_->core().id_count(), 199998u);
  EXPECT_EQ(tok_->special_id("<|endoftext|>"), 199999u);
  // A special token's spelling is text.
  std::vector<uint32_t> ids = tok_->encode("<|endoftext|>");
  EXPECT_GT(ids.size(), 1u);
  for (uint32_t id : ids) EXPECT_LT(id, 199998u);
  EXPECT_EQ(tok_->decode(ids), "<|endoftext|>");
}

TEST_F(O200k, MatchesTiktokenOnTheCorpus) { expect_golden(*tok_, "o200k_corpus.txt"); }

TEST_F(O200k, MatchesTiktokenOnIllFormedUtf8) { expect_golden(*tok_, "o200k_invalid_utf8.bin"); }

TEST_F(O200k, RoundTripsTheCorpus) {
  std::string text = read_file(test::tokenizer_fixture("o200k_corpus.txt"));
  ASSERT_GT(text.size(), 1000000u);
  EXPECT_EQ(tok_->decode(tok_->encode(text)), text);
  std::string bad = read_file(test::tokenizer_fixture("o200k_invalid_utf8.bin"));
  EXPECT_FALSE(is_valid_utf8(bad));
  EXPECT_EQ(tok_->decode(tok_->encode(bad)), sanitize_utf8(bad));
}

TEST_F(O200k, ParallelEncodeIsExact) {
  std::string text = read_file(test::tokenizer_fixture("o200k_corpus.txt"));
  std::vector<uint32_t> serial = tok_->encode(text), out;
  for (int threads : {1, 2, 3, 7, 16}) {
    EXPECT_EQ(tok_->encode_parallel(text, threads), serial) << threads << " threads";
    ParallelEncodeOptions options;  // small chunks: many cuts, most intervals without one
    options.threads = threads;
    options.chunk_bytes = 1000;
    tok_->encode_parallel(text, options, out);
    EXPECT_EQ(out, serial) << threads << " threads, 1000-byte chunks";
  }
  std::string bad = read_file(test::tokenizer_fixture("o200k_invalid_utf8.bin"));
  EXPECT_EQ(tok_->encode_parallel(bad + text, 4), tok_->encode(bad + text));
}

// The per-thread cache sizes (QUILL_BPE_*) change only the speed: tiny caches (flushed or
// overwritten all the time) and large ones give tiktoken's ids, serially and in parallel.
TEST_F(O200k, CacheSizesDoNotChangeTheIds) {
  std::string text = read_file(test::tokenizer_fixture("o200k_corpus.txt"));
  const std::vector<uint32_t> want = tok_->encode(text);
  const BpeCacheSizes before = tok_->core().cache_sizes();
  for (BpeCacheSizes sizes : {BpeCacheSizes{1, 1, 16}, BpeCacheSizes{4096, 16384, 4096}, BpeCacheSizes{1u << 18, 1u << 18, 1u << 16}}) {
    tok_->set_cache_sizes(sizes);
    EXPECT_EQ(tok_->encode(text), want) << sizes.front_entries << "/" << sizes.pair_slots << "/" << sizes.piece_slots;
    EXPECT_EQ(tok_->encode_parallel(text, 3), want) << sizes.front_entries << "/" << sizes.pair_slots << "/" << sizes.piece_slots;
  }
  tok_->set_cache_sizes(before);
  expect_golden(*tok_, "o200k_corpus.txt");
}

TEST_F(O200k, InklingSpecialsOnTheO200kRanks) {
  // The rank file with the Inkling control tokens is the stand-in for Inkling's tokenizer.
  auto inkling = load_tokenizer(test::find_o200k_ranks());
  EXPECT_EQ(inkling->special_id("<|message_model|>"), 200001u);
  EXPECT_EQ(inkling->special_id("<|content_model_end_sampling|>"), 200006u);
  EXPECT_EQ(inkling->vocab_size(), 200058);
  EXPECT_EQ(inkling->encode("Hello world"), (std::vector<uint32_t>{13225, 2375}));
}

}  // namespace
}  // namespace quill
