// Whole characters as starting parts (bpe_char_parts.h) against tiktoken's merge from bytes,
// written plainly: on random vocabularies full of tokens that cross character edges (the cases
// rules (a) and (c) exclude), and on o200k with real CJK, Cyrillic, Greek, ... runs cut at every
// size around the scan/tree crossover.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "base/file_util.h"
#include "base/rng.h"
#include "base/thread_pool.h"
#include "data/bpe.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer_loader.h"
#include "o200k_test_util.h"

namespace quill {
namespace {

// tiktoken's merge from single bytes: a pair merges when its concatenation is a token, lowest
// rank (= id) first, leftmost on a tie. `rank_of` answers for any byte string.
template <typename RankOf>
std::vector<uint32_t> bytes_merge(const RankOf& rank_of, const std::string& piece) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    size_t best = 0;
    uint32_t best_rank = BpeCore::kNoId;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      uint32_t r = rank_of(parts[i] + parts[i + 1]);
      if (r < best_rank) {
        best_rank = r;
        best = i;
      }
    }
    if (best_rank == BpeCore::kNoId) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + static_cast<long>(best) + 1);
  }
  std::vector<uint32_t> out;
  for (const std::string& p : parts) out.push_back(rank_of(p));
  return out;
}

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
  } else {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  }
  s += static_cast<char>(0x80 | (cp & 0x3F));
  return s;
}

size_t parts_of(const CharParts& parts, const BpeCore& core, const std::string& piece) {
  std::vector<uint32_t> byte_id(256), ids(piece.size());
  for (int b = 0; b < 256; ++b) byte_id[b] = *core.find_token(std::string(1, static_cast<char>(b)));
  std::vector<uint16_t> bytes(piece.size());
  return parts.split(reinterpret_cast<const uint8_t*>(piece.data()), piece.size(), byte_id.data(), ids.data(),
                     bytes.data());
}

// Random vocabularies over a few 2- and 3-byte characters (sharing lead and continuation bytes)
// and ASCII, in random rank order: characters, their halves, words of characters, and tokens that
// cross character edges (" " + a lead byte, a word + the first two bytes of a character, the
// last byte(s) of a character + a word), which make rules (a) and (c) refuse characters in some
// places and not in others.
TEST(BpeCharParts, MergesMatchTheByteMergeOnRandomVocabularies) {
  for (uint64_t seed : {11u, 12u, 13u, 14u}) {
    SplitMix64 rng(seed);
    std::vector<std::string> chars;
    for (uint32_t cp : {0x4E2Du, 0x4E8Cu, 0x4E8Du, 0x6587u, 0x6588u, 0x5B57u, 0x5B58u, 0x3042u, 0x3044u, 0x0434u,
                        0x0435u, 0x03B1u})
      chars.push_back(utf8(cp));
    const std::vector<std::string> ascii = {" ", "a", "b", "\n"};
    // Most characters (and a half of each) rank before every longer token, as in a trained
    // vocabulary; the others, and everything longer, in random order.
    std::vector<std::string> front, extra;
    auto any_char = [&] { return chars[rng.below(chars.size())]; };
    for (const std::string& c : chars) {
      std::vector<std::string>& to = rng.below(4) != 0 ? front : extra;
      if (c.size() == 3) to.push_back(rng.below(2) == 0 ? c.substr(0, 2) : c.substr(1));
      if (rng.below(6) != 0) to.push_back(c);
    }
    for (int k = 0; k < 60; ++k) {
      std::string w = any_char() + any_char();
      if (rng.below(2) == 0) w += any_char();
      extra.push_back(w);
      if (rng.below(3) == 0) extra.push_back(" " + any_char());
    }
    for (int k = 0; k < 25; ++k) {  // the edge-crossing kinds, half of them among the first
      std::string c = any_char(), d = any_char();
      std::vector<std::string>& to = rng.below(2) == 0 ? front : extra;
      switch (rng.below(5)) {
        case 0: to.push_back(ascii[rng.below(ascii.size())] + d.substr(0, 1)); break;
        case 1: to.push_back(c + d.substr(0, d.size() - 1)); break;
        case 2: to.push_back(c.substr(c.size() - 1) + d); break;
        case 3: to.push_back(c.substr(c.size() - 1) + d.substr(0, 1)); break;
        default: to.push_back(c.substr(1) + d + any_char()); break;
      }
    }
    for (auto* v : {&front, &extra}) {
      for (size_t i = v->size(); i > 1; --i) std::swap((*v)[i - 1], (*v)[rng.below(i)]);
    }
    extra.insert(extra.begin(), front.begin(), front.end());
    std::vector<std::string> tokens;
    std::map<std::string, uint32_t> ranks;
    for (int b = 0; b < 256; ++b) {
      tokens.emplace_back(1, static_cast<char>(b));
      ranks[tokens.back()] = static_cast<uint32_t>(b);
    }
    for (const std::string& t : extra) {
      if (ranks.emplace(t, static_cast<uint32_t>(tokens.size())).second) tokens.push_back(t);
    }
    BpeCore core = BpeCore::from_ranks(tokens, "random");
    auto rank_of = [&](const std::string& s) {
      auto it = ranks.find(s);
      return it == ranks.end() ? BpeCore::kNoId : it->second;
    };
    const CharParts parts = CharParts::build(core);
    ASSERT_FALSE(parts.empty()) << seed;
    size_t whole = 0, pieces = 0;
    for (int i = 0; i < 600; ++i) {
      std::string piece;
      size_t n = 1 + rng.below(i % 5 == 0 ? 120 : 30);
      for (size_t k = 0; k < n; ++k) piece += rng.below(4) == 0 ? ascii[rng.below(ascii.size())] : any_char();
      std::vector<uint32_t> want = bytes_merge(rank_of, piece), got, tree;
      core.merge_piece(piece, got);
      core.merge_piece(piece, tree, /*force_tree=*/true);
      EXPECT_EQ(got, want) << "seed " << seed << " piece " << piece;
      EXPECT_EQ(tree, want) << "seed " << seed << " piece " << piece;
      whole += piece.size() - parts_of(parts, core, piece);
      ++pieces;
    }
    EXPECT_GT(whole, pieces) << "seed " << seed << ": characters should start whole in most pieces";
  }
}

// What each rule excludes, one case each, in a vocabulary built for it.
TEST(BpeCharParts, EachRuleRefusesWhatWouldChangeTheMerge) {
  const std::string zhong = utf8(0x4E2D), wen = utf8(0x6587);  // 中 文
  auto build = [](const std::vector<std::string>& extra) {
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
    tokens.insert(tokens.end(), extra.begin(), extra.end());
    return BpeCore::from_ranks(tokens, "rules");
  };
  auto check = [&](const BpeCore& core, const std::vector<std::string>& extra, const std::string& piece,
                   size_t want_parts) {
    auto rank_of = [&](const std::string& s) -> uint32_t {
      if (s.size() == 1) return static_cast<uint8_t>(s[0]);
      for (size_t k = 0; k < extra.size(); ++k) {
        if (extra[k] == s) return static_cast<uint32_t>(256 + k);
      }
      return BpeCore::kNoId;
    };
    std::vector<uint32_t> got;
    core.merge_piece(piece, got);
    EXPECT_EQ(got, bytes_merge(rank_of, piece)) << piece;
    EXPECT_EQ(parts_of(CharParts::build(core), core, piece), want_parts) << piece;
  };
  // Plain: both characters start whole.
  std::vector<std::string> plain = {zhong.substr(0, 2), zhong, wen.substr(1), wen, zhong + wen};
  check(build(plain), plain, zhong + wen, 2);
  // (a) left: " " + the lead byte of 文 is a token, so 文 after a space starts as bytes (the
  // space takes its lead byte first: rank 256), elsewhere whole.
  std::vector<std::string> left = {" " + wen.substr(0, 1), zhong.substr(0, 2), zhong, wen.substr(1), wen};
  check(build(left), left, zhong + " " + wen, 2 + 3);
  check(build(left), left, zhong + wen, 2);
  // (a) right and left: the last byte of 中 + the lead byte of 文 ranks first, so both start as
  // bytes (whole, they would end as [中, 文]).
  std::vector<std::string> cross = {zhong.substr(2) + wen.substr(0, 1), zhong.substr(0, 2), zhong, wen.substr(1), wen};
  check(build(cross), cross, zhong + wen, 6);
  // (c): 中文 ranks before 中's own last merge and 文a between, so 中 may not start whole (the
  // byte merge makes 文a before 中 exists: [中, 文a]; with 中 whole, 中文 would come first).
  std::vector<std::string> early = {wen.substr(1), wen, zhong + wen, wen + "a", zhong.substr(0, 2), zhong};
  check(build(early), early, zhong + wen + "a", 3 + 1 + 1);
  // (b): neither half of 中 is a token, so alone it stays three bytes.
  std::vector<std::string> halves = {zhong, wen.substr(1), wen};
  check(build(halves), halves, zhong + wen, 3 + 1);
}

// o200k: every run of non-ASCII characters of the golden corpus (30 languages), cut at lengths
// around the scan/tree crossover (BpeCore::kSmallParts parts) and below, merged through
// merge_piece (the scan, or the tree for more parts), the tree alone, and the byte merge.
TEST(BpeCharParts, O200kRunsMatchTheByteMerge) {
  std::string ranks = test::find_o200k_ranks();
  if (ranks.empty()) GTEST_SKIP() << test::kNoO200kRanks;
  auto tok = BpeTokenizer::from_tiktoken(ranks, special_token_set("o200k"));
  const BpeCore& core = tok->core();
  auto rank_of = [&](const std::string& s) { return core.find_token(s).value_or(BpeCore::kNoId); };
  std::string text = read_file(test::tokenizer_fixture("o200k_corpus.txt"));
  std::vector<std::string> runs;
  for (size_t i = 0; i < text.size();) {
    size_t j = i;
    while (j < text.size() && static_cast<uint8_t>(text[j]) >= 0x80) ++j;
    if (j - i >= 6) runs.push_back(text.substr(i, j - i));
    i = j + 1;
  }
  ASSERT_GT(runs.size(), 200u);
  const CharParts parts = CharParts::build(core);
  size_t checked = 0, whole = 0;
  SplitMix64 rng(7);
  for (size_t r = 0; r < runs.size(); r += 1 + rng.below(4)) {
    const std::string& run = runs[r];
    // Byte lengths around the crossover, and the shortest prefixes of kSmallParts - 1, kSmallParts
    // and kSmallParts + 1 parts (where characters start whole, parts are fewer than bytes).
    std::vector<size_t> cuts = {run.size(), BpeCore::kSmallParts - 1, BpeCore::kSmallParts, BpeCore::kSmallParts + 1};
    if (run.size() < 2000) {
      size_t target = BpeCore::kSmallParts - 1;
      for (size_t cut = 1; cut <= run.size() && target <= BpeCore::kSmallParts + 1; ++cut) {
        if (parts_of(parts, core, run.substr(0, cut)) == target) {
          cuts.push_back(cut);
          ++target;
        }
      }
    }
    for (size_t cut : cuts) {
      if (cut > run.size()) continue;
      const std::string piece = run.substr(0, cut);
      std::vector<uint32_t> want = bytes_merge(rank_of, piece), got, tree;
      core.merge_piece(piece, got);
      core.merge_piece(piece, tree, /*force_tree=*/true);
      ASSERT_EQ(got, want) << "run " << r << " cut " << cut;
      ASSERT_EQ(tree, want) << "run " << r << " cut " << cut;
      whole += piece.size() - parts_of(parts, core, piece);
      ++checked;
    }
  }
  EXPECT_GT(checked, 300u);
  EXPECT_GT(whole, checked * 4) << "o200k's characters should mostly start whole";
}

}  // namespace
}  // namespace quill

namespace quill {
namespace {

// may_pair: never false for two characters that make a token (the merge would miss it), and
// false for most neighbouring characters that do not (else it saves nothing).
TEST(BpeCharParts, O200kPartnerFilterHasNoFalseNegatives) {
  std::string ranks = test::find_o200k_ranks();
  if (ranks.empty()) GTEST_SKIP() << test::kNoO200kRanks;
  auto tok = BpeTokenizer::from_tiktoken(ranks, special_token_set("o200k"));
  const BpeCore& core = tok->core();
  const CharParts parts = CharParts::build(core);
  std::vector<uint32_t> byte_id(256);
  for (int b = 0; b < 256; ++b) byte_id[b] = *core.find_token(std::string(1, static_cast<char>(b)));
  auto split = [&](const std::string& s, std::vector<uint32_t>& ids, std::vector<uint16_t>& bytes) {
    ids.resize(s.size());
    bytes.resize(s.size());
    size_t m = parts.split(reinterpret_cast<const uint8_t*>(s.data()), s.size(), byte_id.data(), ids.data(), bytes.data());
    ids.resize(m);
    bytes.resize(m);
  };
  std::vector<uint32_t> ids;
  std::vector<uint16_t> bytes;
  size_t two_char_tokens = 0;
  for (uint32_t id = 0; id < core.id_count(); ++id) {
    std::string t(core.token_bytes(id));
    if (t.size() < 4) continue;
    split(t, ids, bytes);
    if (ids.size() != 2 || bytes[0] < CharParts::kCharBase || bytes[1] < CharParts::kCharBase) continue;
    EXPECT_TRUE(parts.may_pair(bytes[0], ids[1])) << "token " << id;
    ++two_char_tokens;
  }
  EXPECT_GT(two_char_tokens, 1000u);
  std::string text = read_file(test::tokenizer_fixture("o200k_corpus.txt"));
  split(text, ids, bytes);
  size_t no_token = 0, filtered = 0;
  for (size_t k = 0; k + 1 < ids.size(); ++k) {
    if (bytes[k] < CharParts::kCharBase || bytes[k + 1] < CharParts::kCharBase) continue;
    std::string pair = std::string(core.token_bytes(ids[k])) + std::string(core.token_bytes(ids[k + 1]));
    if (core.find_token(pair)) continue;
    ++no_token;
    filtered += !parts.may_pair(bytes[k], ids[k + 1]);
  }
  EXPECT_GT(no_token, 10000u);
  EXPECT_GT(filtered, no_token / 2);
}

}  // namespace
}  // namespace quill

namespace quill {
namespace {

// Built on several threads, the starting parts (and partner filters) are the one-thread ones.
TEST(BpeCharParts, O200kSameOnAnyThreads) {
  std::string ranks = test::find_o200k_ranks();
  if (ranks.empty()) GTEST_SKIP() << test::kNoO200kRanks;
  auto tok = BpeTokenizer::from_tiktoken(ranks, special_token_set("o200k"));
  const BpeCore& core = tok->core();
  std::string text = read_file(test::tokenizer_fixture("o200k_corpus.txt"));
  std::vector<uint32_t> byte_id(256);
  for (int b = 0; b < 256; ++b) byte_id[b] = *core.find_token(std::string(1, static_cast<char>(b)));
  auto parts_of = [&](const CharParts& parts, std::vector<uint32_t>& ids, std::vector<uint16_t>& bytes) {
    ids.resize(text.size());
    bytes.resize(text.size());
    size_t m = parts.split(reinterpret_cast<const uint8_t*>(text.data()), text.size(), byte_id.data(), ids.data(),
                           bytes.data());
    ids.resize(m);
    bytes.resize(m);
  };
  std::vector<uint32_t> want_ids, ids;
  std::vector<uint16_t> want_bytes, bytes;
  const CharParts one = CharParts::build(core);
  parts_of(one, want_ids, want_bytes);
  ASSERT_LT(want_ids.size(), text.size());
  for (int threads : {2, 3, 8}) {
    ThreadPool pool(threads);
    const CharParts many = CharParts::build(core, &pool);
    parts_of(many, ids, bytes);
    ASSERT_EQ(ids, want_ids) << threads;
    ASSERT_EQ(bytes, want_bytes) << threads;
    for (size_t k = 0; k + 1 < ids.size(); ++k) {
      if (bytes[k] >= CharParts::kCharBase && bytes[k + 1] >= CharParts::kCharBase) {
        ASSERT_EQ(many.may_pair(bytes[k], ids[k + 1]), one.may_pair(bytes[k], ids[k + 1])) << threads << " at " << k;
      }
    }
  }
}

}  // namespace
}  // namespace quill
