// parse_rank_file on several threads: the same token table as a plain serial parse, and the same
// error naming the same first bad line, whatever the thread count and range size (rank files in
// order, out of order, with gaps, a rank twice, bad lines, CRLF).
#include <gtest/gtest.h>

#include <random>

#include "data/rank_file.h"
#include "data_test_util.h"

namespace quill {
namespace {

// What one thread makes of it, in the plainest way: the table, or the error message.
std::string serial_parse(std::string_view text) {
  std::vector<std::string> tokens;
  size_t line_no = 0;
  auto fail = [&](const std::string& what) { return "error: f:" + std::to_string(line_no) + ": " + what; };
  for (size_t pos = 0; pos < text.size();) {
    size_t eol = text.find('\n', pos);
    if (eol == std::string_view::npos) eol = text.size();
    std::string_view line = text.substr(pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    size_t space = line.find(' ');
    if (space == std::string_view::npos || space == 0) return fail("expected");
    std::string_view b64 = line.substr(0, space), rank_text = line.substr(space + 1);
    std::string bytes;
    for (size_t i = 0; i < b64.size(); i += 4) {  // the test writes whole padded quads
      auto v = [](char c) -> int {
        const std::string k = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        size_t at = k.find(c);
        return at == std::string::npos ? -1 : static_cast<int>(at);
      };
      uint32_t acc = 0;
      int got = 0;
      for (size_t j = i; j < i + 4 && j < b64.size() && b64[j] != '='; ++j, ++got) {
        if (v(b64[j]) < 0) return fail("the token is not base64");
        acc |= static_cast<uint32_t>(v(b64[j])) << (18 - 6 * (j - i));
      }
      for (int k = 0; k + 1 < got; ++k) bytes += static_cast<char>((acc >> (16 - 8 * k)) & 0xFF);
    }
    if (bytes.empty()) return fail("the token is not base64");
    if (rank_text.empty() || rank_text.size() > 9 || rank_text.find_first_not_of("0123456789") != std::string_view::npos) {
      return fail("the rank is not a number");
    }
    size_t rank = std::stoul(std::string(rank_text));
    if (rank >= tokens.size()) tokens.resize(rank + 1);
    if (!tokens[rank].empty()) return fail("rank " + std::to_string(rank) + " appears twice");
    tokens[rank] = bytes;
  }
  if (tokens.empty()) return "error: f: no ranks";
  std::string out;
  for (const std::string& t : tokens) out += std::to_string(t.size()) + ":" + t + ";";
  return out;
}

std::string parallel_parse(std::string_view text, ThreadPool& pool, size_t range) {
  try {
    TokenBytes t = parse_rank_file(text, "f", pool, range);
    std::string out;
    for (size_t id = 0; id < t.size(); ++id) out += std::to_string(t.at(id).size()) + ":" + std::string(t.at(id)) + ";";
    return out;
  } catch (const Error& e) {
    std::string msg = e.what();
    // Reduce the message to what serial_parse writes: "f:LINE: " and the start of the reason.
    for (const char* reason : {"expected", "the token is not base64", "the rank is not a number", "no ranks"}) {
      size_t at = msg.find(reason);
      if (at != std::string::npos) return "error: " + msg.substr(0, at) + reason;
    }
    return "error: " + msg;
  }
}

std::string random_file(std::mt19937& rng) {
  size_t n = 1 + rng() % 300;
  std::vector<size_t> ranks(n);
  for (size_t i = 0; i < n; ++i) ranks[i] = i;
  int kind = static_cast<int>(rng() % 6);
  if (kind == 1) std::shuffle(ranks.begin(), ranks.end(), rng);  // out of order
  if (kind == 2) {
    for (size_t& r : ranks) r += r / 7;  // gaps
  }
  std::string text;
  for (size_t i = 0; i < n; ++i) {
    std::string bytes;
    for (size_t k = 0, len = 1 + rng() % 9; k < len; ++k) bytes += static_cast<char>(rng() % 256);
    size_t rank = ranks[i];
    if (kind == 3 && rng() % 50 == 0) rank = ranks[rng() % n];  // a rank twice, perhaps
    std::string line = test::base64(bytes) + " " + std::to_string(rank);
    if (kind == 4 && rng() % 80 == 0) line = std::vector<std::string>{"nospace", " 5", "!!!! 3", "QQ== x", "QQ== 1234567890"}[rng() % 5];
    text += line + (kind == 5 && i % 3 == 0 ? "\r\n" : "\n");
    if (rng() % 40 == 0) text += "\n";  // blank lines count
  }
  if (rng() % 2) text.pop_back();  // no final newline
  return text;
}

TEST(RankFile, SameTableAndErrorsAsASerialParse) {
  std::mt19937 rng(9);
  std::vector<std::string> files = {"", "\n", "QQ== 0", "QQ== 0\nQg== 0\n", "QQ== 1\n"};
  for (int i = 0; i < 150; ++i) files.push_back(random_file(rng));
  int errors = 0;
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (const std::string& text : files) {
      std::string want = serial_parse(text);
      errors += want.rfind("error", 0) == 0;
      for (size_t range : {size_t{1}, size_t{7}, size_t{100}, size_t{0}}) {
        EXPECT_EQ(parallel_parse(text, pool, range), want) << "threads " << threads << " range " << range << "\n" << text;
      }
    }
  }
  EXPECT_GT(errors, 20);  // the files exercise the errors too
}

}  // namespace
}  // namespace quill
