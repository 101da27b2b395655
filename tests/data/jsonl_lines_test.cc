// split_jsonl_lines: the same lines, numbers and count as a plain serial scan, whatever the
// thread count and range size (ranges that cut lines anywhere, blank lines, CR, no final '\n').
#include <gtest/gtest.h>

#include <random>

#include "data/jsonl_lines.h"

namespace quill {
namespace {

JsonlLines serial_lines(std::string_view text) {
  JsonlLines out;
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    ++out.total;
    std::string_view line = text.substr(pos, eol - pos);
    if (line.find_first_not_of(" \t\r") != std::string_view::npos) out.lines.push_back({pos, line.size(), out.total});
    pos = eol + 1;
  }
  return out;
}

void expect_same(const JsonlLines& got, const JsonlLines& want, const std::string& what) {
  EXPECT_EQ(got.total, want.total) << what;
  ASSERT_EQ(got.lines.size(), want.lines.size()) << what;
  for (size_t i = 0; i < want.lines.size(); ++i) {
    EXPECT_EQ(got.lines[i].offset, want.lines[i].offset) << what << " line " << i;
    EXPECT_EQ(got.lines[i].length, want.lines[i].length) << what << " line " << i;
    EXPECT_EQ(got.lines[i].number, want.lines[i].number) << what << " line " << i;
  }
}

TEST(JsonlLines, SameAsASerialScan) {
  std::mt19937 rng(3);
  const std::vector<std::string> pieces = {"{\"a\":1}", "x", "", " ", "\t", "\r", "\n", "\n", "\n", "\r\n", "  \n"};
  std::vector<std::string> texts = {"", "\n", "\n\n", "a", "a\n", "a\nb", " \n\t\r\n{}", "{}\n\n  \n{}"};
  for (int t = 0; t < 200; ++t) {
    std::string s;
    size_t n = rng() % 300;
    for (size_t i = 0; i < n; ++i) s += pieces[rng() % pieces.size()];
    texts.push_back(s);
  }
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (const std::string& text : texts) {
      JsonlLines want = serial_lines(text);
      for (size_t range : {size_t{1}, size_t{2}, size_t{5}, size_t{64}, size_t{0}}) {
        expect_same(split_jsonl_lines(text, pool, range), want,
                    "threads " + std::to_string(threads) + " range " + std::to_string(range) + " text of " +
                        std::to_string(text.size()));
      }
    }
  }
}

}  // namespace
}  // namespace quill
