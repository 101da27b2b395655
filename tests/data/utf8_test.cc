// UTF-8 checks and U+FFFD replacement (the maximal-subpart practice, as Python's
// decode("utf-8", errors="replace") does).
#include <gtest/gtest.h>

#include "data/utf8.h"

namespace quill {
namespace {

const std::string R = "\xEF\xBF\xBD";  // U+FFFD

TEST(Utf8, Valid) {
  EXPECT_TRUE(is_valid_utf8(""));
  EXPECT_TRUE(is_valid_utf8("plain ASCII, long enough to take the eight-byte path"));
  EXPECT_TRUE(is_valid_utf8("\xC3\xA9 \xE4\xB8\xAD \xF0\x9F\x99\x82 \xF4\x8F\xBF\xBF \xED\x9F\xBF"));
  EXPECT_EQ(find_invalid_utf8("abc\x80"), 3u);
  EXPECT_EQ(find_invalid_utf8("0123456789\xC0\x80"), 10u);  // overlong
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));              // surrogate
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));          // above U+10FFFF
  EXPECT_FALSE(is_valid_utf8("\xE0\x9F\xBF"));              // overlong 3-byte
  EXPECT_FALSE(is_valid_utf8("\xF0\x8F\xBF\xBF"));          // overlong 4-byte
  EXPECT_FALSE(is_valid_utf8("\xE4\xB8"));                  // truncated at the end
}

TEST(Utf8, SanitizeMaximalSubparts) {
  // The Unicode standard's example (section 3.9, table 3-8):
  // 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a FFFD FFFD FFFD b FFFD c FFFD FFFD d
  EXPECT_EQ(sanitize_utf8("a\xF1\x80\x80\xE1\x80\xC2" "b\x80" "c\x80\xBF" "d"),
            "a" + R + R + R + "b" + R + "c" + R + R + "d");
  EXPECT_EQ(sanitize_utf8("\xC0\x80"), R + R);          // C0 never starts a sequence
  EXPECT_EQ(sanitize_utf8("\xE0\x80\x80"), R + R + R);  // E0 80: 80 is outside A0..BF
  EXPECT_EQ(sanitize_utf8("\xED\xA0\x80"), R + R + R);  // surrogates
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98"), R);          // one truncated emoji: one U+FFFD
  EXPECT_EQ(sanitize_utf8("\xF0\x9F\x98x"), R + "x");
  EXPECT_EQ(sanitize_utf8("\xE2\x28\xA1"), R + "(" + R);
  EXPECT_EQ(sanitize_utf8("\xFF\xFE"), R + R);
  EXPECT_EQ(sanitize_utf8("ok \xC3\xA9"), "ok \xC3\xA9");  // valid text unchanged
  EXPECT_TRUE(is_valid_utf8(sanitize_utf8("\x80\x81\xC3\xF5\xF8\x88\x80\x80\x80")));
}

}  // namespace
}  // namespace quill
