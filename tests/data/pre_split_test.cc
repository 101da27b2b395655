// The pre-tokenizer split: the o200k_base pattern on PCRE2, cases checked by hand against the
// pattern's alternatives (tiktoken's find_iter gives the same pieces).
#include <gtest/gtest.h>

#include "base/rng.h"
#include "data/pre_split.h"
#include "data_test_util.h"

namespace quill {
namespace {

std::vector<std::string> split(const PreSplitRegex& re, std::string_view text) {
  std::vector<std::string> out;
  size_t pos = 0, b = 0, e = 0;
  while (pos < text.size() && re.find(text, pos, &b, &e)) {
    EXPECT_EQ(b, pos) << "the o200k pattern leaves no gaps";
    out.emplace_back(text.substr(b, e - b));
    pos = e;
  }
  return out;
}

using V = std::vector<std::string>;

TEST(PreSplit, O200kPieces) {
  PreSplitRegex re(kO200kPattern);
  EXPECT_TRUE(re.jit());
  EXPECT_EQ(split(re, "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split(re, "I'm here, they'LL go"), (V{"I'm", " here", ",", " they'LL", " go"}));
  EXPECT_EQ(split(re, "don't"), (V{"don't"}));
  EXPECT_EQ(split(re, "HTTPServer iPhone"), (V{"HTTPServer", " i", "Phone"}));  // upper* lower+ first
  EXPECT_EQ(split(re, "12345 1234567"), (V{"123", "45", " ", "123", "456", "7"}));
  EXPECT_EQ(split(re, "a   b"), (V{"a", "  ", " b"}));          // \s+(?!\S) leaves the last space
  EXPECT_EQ(split(re, "a\n\nb"), (V{"a", "\n\n", "b"}));
  EXPECT_EQ(split(re, "foo.\n\nBar"), (V{"foo", ".\n\n", "Bar"}));  // punctuation takes [\r\n/]*
  EXPECT_EQ(split(re, "x  \n  y"), (V{"x", "  \n", " ", " y"}));
  EXPECT_EQ(split(re, "end   "), (V{"end", "   "}));
  EXPECT_EQ(split(re, " ?!"), (V{" ?!"}));
  EXPECT_EQ(split(re, "<|endoftext|>"), (V{"<|", "endoftext", "|>"}));
  EXPECT_EQ(split(re, "\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C"), (V{"\xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C"}));
}

TEST(PreSplit, WhiteSpaceIsUnicodeWhiteSpace) {
  PreSplitRegex re(kO200kPattern);
  // U+0085 (NEL) is White_Space for tiktoken (Rust) though PCRE2's own \s leaves it out.
  EXPECT_EQ(split(re, "a\xC2\x85\xC2\x85" "b"), (V{"a", "\xC2\x85", "\xC2\x85" "b"}));
  // U+3000 and U+00A0 are White_Space too; U+200B (zero width space) is not.
  EXPECT_EQ(split(re, "a\xE3\x80\x80\xE3\x80\x80" "b"), (V{"a", "\xE3\x80\x80", "\xE3\x80\x80" "b"}));
  EXPECT_EQ(split(re, "a\xE2\x80\x8B" "b"), (V{"a", "\xE2\x80\x8B" "b"}));
}

TEST(PreSplit, CaseInsensitiveContractionsIncludeLongS) {
  PreSplitRegex re(kO200kPattern);
  // (?i:'s) matches the long s U+017F under Unicode case folding, in Rust's regex and in PCRE2.
  EXPECT_EQ(split(re, "it'\xC5\xBF"), (V{"it'\xC5\xBF"}));
  EXPECT_EQ(split(re, "IT'S"), (V{"IT'S"}));
}

TEST(PreSplit, LongWhitespaceRunsMatch) {
  PreSplitRegex re(kO200kPattern);
  std::string text = "a" + std::string(1 << 20, ' ') + "b" + std::string(100000, '\t') + "\n";
  V pieces = split(re, text);
  ASSERT_EQ(pieces.size(), 4u);
  EXPECT_EQ(pieces[1].size(), (1u << 20) - 1);
  EXPECT_EQ(pieces[2], " b");
  EXPECT_EQ(pieces[3].size(), 100001u);
}

TEST(PreSplit, AsciiFastPathEqualsPcre2) {
  PreSplitRegex fast(kO200kPattern), slow(kO200kPattern);
  slow.set_ascii_fast_path(false);
  // Pieces that stress every alternative and every place where a non-ASCII character decides.
  const std::vector<std::string> atoms = {
      "a", "Z", "q", "B", "s", "t", "d", "m", "l", "r", "e", "v", "S", "L", "E", "'", "'", "0", "7", "12", " ", " ",
      "  ", "\t", "\n", "\r", "\r\n", "\v", "\f", "/", ".", ",", "!", "?", "-", "_", "(", "\"", "#", "\x01", "\x7f",
      "\xC3\xA9", "\xC3\x89", "\xC5\xBF", "\xC2\xA0", "\xE3\x80\x80", "\xC2\x85", "\xD9\xA3", "\xE2\x80\x94",
      "\xF0\x9F\x99\x82", "\xCC\x81", "\xE4\xB8\xAD", "\xC2\xB2", "\xE2\x80\x8B"};
  SplitMix64 rng(11);
  for (int round = 0; round < 20000; ++round) {
    std::string text;
    for (uint64_t n = 1 + rng.below(12); n > 0; --n) text += atoms[rng.below(atoms.size())];
    ASSERT_EQ(split(fast, text), split(slow, text)) << "text: " << text;
  }
}

TEST(PreSplit, UnicodeMatcherEqualsPcre2) {
  // o200k_piece decides non-ASCII text by hand (classes from PCRE2): every class of the pattern,
  // marks after spaces and digits, title case, modifier letters, non-ASCII digits and spaces.
  PreSplitRegex fast(kO200kPattern), slow(kO200kPattern);
  slow.set_ascii_fast_path(false);
  const std::vector<std::string> atoms = {
      "a", "Z", "s", "l", "e", "'", " ", "  ", "\t", "\n", "\r", "/", ".", "0", "7", "\x01",
      "\xC3\xA9", "\xC3\x89", "\xC5\xBF", "\xC2\xA0", "\xE3\x80\x80", "\xC2\x85", "\xE2\x80\xA8", "\xE1\x9A\x80",
      "\xD9\xA3", "\xE2\x80\x94", "\xF0\x9F\x99\x82", "\xCC\x81", "\xE0\xA4\xBE", "\xE4\xB8\xAD", "\xC2\xB2",
      "\xE2\x85\xA0", "\xE2\x80\x8B", "\xC7\x85", "\xCA\xB0", "\xE3\x83\xBC", "\xD7\x90", "\xCE\xA3", "\xCF\x83",
      "\xF0\xA0\x80\x80", "\xEF\xBF\xBD", "\xE2\x84\xAA", "\xE0\xB9\x87", "\xE0\xB8\x81", "\xEF\xB8\x8F"};
  SplitMix64 rng(17);
  for (int round = 0; round < 50000; ++round) {
    std::string text;
    for (uint64_t n = 1 + rng.below(14); n > 0; --n) text += atoms[rng.below(atoms.size())];
    ASSERT_EQ(split(fast, text), split(slow, text)) << "text: " << text;
  }
}

TEST(PreSplit, PatternTranslation) {
  EXPECT_EQ(pcre2_pattern_from_rust(R"(a\sb)"),
            R"(a[\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]b)");
  EXPECT_EQ(pcre2_pattern_from_rust(R"([^\s\p{L}])"),
            R"([^\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}\p{L}])");
  EXPECT_EQ(pcre2_pattern_from_rust(R"(\S\\s[]\s])"),
            R"([^\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}]\\s[]\t-\r\x{20}\x{85}\x{A0}\x{1680}\x{2000}-\x{200A}\x{2028}\x{2029}\x{202F}\x{205F}\x{3000}])");
  test::expect_error([] { pcre2_pattern_from_rust(R"([\S])"); }, {"\\S inside a character class"});
  test::expect_error([] { PreSplitRegex bad("(unclosed"); }, {"does not compile", "(unclosed"});
}

}  // namespace
}  // namespace quill
