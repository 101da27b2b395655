// The cut points and chunks of parallel encoding (text_chunks.h), against a plain reference: the
// chunks tile the text in order, every inner boundary is a cut point, and they are the same
// whichever chunk is computed first.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/rng.h"
#include "data/text_chunks.h"

namespace quill {
namespace {

bool is_cut(const std::string& t, size_t p) {
  auto alnum = [](char c) { return (c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); };
  return p > 0 && p < t.size() && t[p - 1] == '\n' && alnum(t[p]);
}

// The chunk begins by the definition: 0, then the first cut point of each later interval.
std::vector<size_t> reference_begins(const std::string& t, size_t chunk) {
  std::vector<size_t> begins = {0};
  for (size_t lo = chunk; lo < t.size(); lo += chunk) {
    for (size_t p = lo; p < std::min(t.size(), lo + chunk); ++p) {
      if (is_cut(t, p)) {
        begins.push_back(p);
        break;
      }
    }
  }
  return begins;
}

TEST(TextChunks, CutPoints) {
  EXPECT_EQ(first_cut_point("ab\ncd", 0, 5), 3u);
  EXPECT_EQ(first_cut_point("ab\n cd\n9", 0, 8), 7u);    // not before a space; before a digit
  EXPECT_EQ(first_cut_point("ab\n cd\n9", 0, 7), 7u);    // none below `to`: `to`
  EXPECT_EQ(first_cut_point("\nA", 0, 2), 1u);
  EXPECT_EQ(first_cut_point("A\n", 0, 2), 2u);           // a final newline is no cut
  EXPECT_EQ(first_cut_point("\r\nX\n\xC3\xA9\nZ", 0, 99), 2u);
  EXPECT_EQ(first_cut_point("\r\nX\n\xC3\xA9\nZ", 3, 99), 7u);  // not before a non-ASCII letter
  EXPECT_EQ(first_cut_point("a\nb\nc", 2, 3), 2u);       // the cut is at `from`, its '\n' before it
  EXPECT_EQ(first_cut_point("a\nb\nc", 3, 4), 4u);       // none in [3, 4)
  EXPECT_EQ(first_cut_point("", 0, 0), 0u);
}

TEST(TextChunks, TileTheTextAndMatchTheReference) {
  SplitMix64 rng(7);
  const std::string alphabet = "ab1 \n\n\r.";
  for (int round = 0; round < 400; ++round) {
    std::string t;
    for (uint64_t n = rng.below(round % 10 == 0 ? 3000 : 300); n > 0; --n) t += alphabet[rng.below(alphabet.size())];
    if (round % 7 == 0) t += "\xC3\xA9\n\xE4\xB8\xAD";  // non-ASCII text is never cut
    for (size_t chunk : {1u, 2u, 5u, 16u, 97u, 4096u}) {
      const size_t n = chunk_count(t.size(), chunk);
      ASSERT_EQ(n, (t.size() + chunk - 1) / chunk);
      std::vector<size_t> begins;
      size_t at = 0;
      // In reverse order: each chunk is found from the text alone.
      std::vector<TextChunk> chunks(n);
      for (size_t j = n; j-- > 0;) chunks[j] = text_chunk(t, chunk, j);
      for (size_t j = 0; j < n; ++j) {
        const TextChunk& c = chunks[j];
        if (c.begin == c.end) continue;
        ASSERT_EQ(c.begin, at) << "round " << round << " chunk " << chunk << " j " << j;
        ASSERT_TRUE(c.begin == 0 || is_cut(t, c.begin)) << c.begin;
        ASSERT_LT(c.begin, c.end);
        begins.push_back(c.begin);
        at = c.end;
      }
      EXPECT_EQ(at, t.size());
      if (!t.empty()) {
        EXPECT_EQ(begins, reference_begins(t, chunk)) << "round " << round << " chunk " << chunk;
      }
    }
  }
}

TEST(TextChunks, NoCutPointIsOneChunk) {
  std::string t(10000, 'x');
  t[5000] = '\n';  // before a space: no cut point
  t[5001] = ' ';
  ASSERT_EQ(chunk_count(t.size(), 1000), 10u);
  TextChunk first = text_chunk(t, 1000, 0);
  EXPECT_EQ(first.begin, 0u);
  EXPECT_EQ(first.end, t.size());
  for (size_t j = 1; j < 10; ++j) EXPECT_EQ(text_chunk(t, 1000, j).begin, text_chunk(t, 1000, j).end) << j;
}

}  // namespace
}  // namespace quill
