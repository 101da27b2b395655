// BPE mechanics on tiny hand-made tokenizers (a tokenizer.json with merges in both spellings, a
// tiktoken rank file), the loaders' errors, and the two merge algorithms against a plain
// reference on random vocabularies.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>
#include <map>
#include <variant>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "base/rng.h"
#include "data/bpe.h"
#include "base/thread_pool.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer_loader.h"
#include "data/utf8.h"
#include "data_test_util.h"

namespace quill {
namespace {

using nlohmann::json;
using test::expect_error;
using test::TempDir;

// GPT-2's bytes_to_unicode, written forwards (the loader holds the inverse).
std::string byte_level(std::string_view bytes) {
  std::string out;
  for (unsigned char b : bytes) {
    uint32_t cp = b;
    if (!((b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174))) {
      int k = 0;
      for (int x = 0; x < b; ++x) k += !((x >= 33 && x <= 126) || (x >= 161 && x <= 172) || (x >= 174));
      cp = 256 + k;
    }
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

// The tiny vocabulary: bytes get the permuted ids (7b + 3) mod 256, so ids and ranks differ.
uint32_t byte_id(char c) { return (static_cast<unsigned char>(c) * 7u + 3u) % 256u; }

const std::vector<std::pair<std::string, uint32_t>> kMerged = {
    {"bc", 256}, {"ab", 257}, {"abc", 258}, {"cd", 259}, {"aa", 260}, {"34", 261}, {"abcd", 262}};
// Priority order. "abcd" has no merge: only ignore_merges reaches it.
const std::vector<std::pair<std::string, std::string>> kMerges = {
    {"b", "c"}, {"a", "b"}, {"a", "bc"}, {"c", "d"}, {"a", "a"}, {"3", "4"}};

json o200k_pre_tokenizer() {
  return {{"type", "Sequence"},
          {"pretokenizers",
           {{{"type", "Split"}, {"pattern", {{"Regex", std::string(kO200kPattern)}}}, {"behavior", "Isolated"},
             {"invert", false}},
            {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", false}}}}};
}

json tiny_hf(bool array_merges, bool ignore_merges, json pre = o200k_pre_tokenizer(),
             const std::function<uint32_t(char)>& id_of_byte = byte_id, bool with_abcd = true) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_level(std::string(1, static_cast<char>(b)))] = id_of_byte(static_cast<char>(b));
  for (const auto& [bytes, id] : kMerged) {
    if (with_abcd || bytes != "abcd") vocab[byte_level(bytes)] = id;
  }
  json merges = json::array();
  for (const auto& [a, b] : kMerges) {
    if (array_merges) merges.push_back({byte_level(a), byte_level(b)});
    else merges.push_back(byte_level(a) + " " + byte_level(b));
  }
  return {{"version", "1.0"},
          {"normalizer", nullptr},
          {"pre_tokenizer", pre},
          {"decoder", {{"type", "ByteLevel"}}},
          {"added_tokens",
           {{{"id", 400}, {"content", "<|end|>"}, {"special", true}},
            {{"id", 401}, {"content", "<|plain_added|>"}, {"special", false}}}},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"continuing_subword_prefix", nullptr},
            {"end_of_word_suffix", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"ignore_merges", ignore_merges},
            {"vocab", vocab},
            {"merges", merges}}}};
}

std::unique_ptr<BpeTokenizer> load_hf(const TempDir& tmp, const json& j, const std::string& name = "tokenizer.json") {
  write_file_atomic(tmp.sub(name), j.dump(2));
  return BpeTokenizer::from_hf_json(tmp.sub(name));
}

std::vector<uint32_t> ids(std::initializer_list<std::variant<char, uint32_t>> parts) {
  std::vector<uint32_t> out;
  for (const auto& p : parts) out.push_back(std::holds_alternative<char>(p) ? byte_id(std::get<char>(p)) : std::get<uint32_t>(p));
  return out;
}

TEST(BpeHf, MergesByPriorityLeftmostFirst) {
  TempDir tmp;
  auto tok = load_hf(tmp, tiny_hf(false, false));
  EXPECT_EQ(tok->kind(), "hf-tokenizer.json");
  EXPECT_EQ(tok->name(), "hf:tokenizer.json");
  // a b c d: (b,c) has the best rank -> a bc d; then (a,bc) -> abc d; (abc,d) is no merge.
  EXPECT_EQ(tok->encode("abcd"), ids({258u, 'd'}));
  EXPECT_EQ(tok->encode("abc"), ids({258u}));
  EXPECT_EQ(tok->encode("cab"), ids({'c', 257u}));
  EXPECT_EQ(tok->encode("aaaa"), ids({260u, 260u}));  // leftmost first: aa aa, not a aa a
  EXPECT_EQ(tok->encode("aaa"), ids({260u, 'a'}));
  EXPECT_EQ(tok->encode("cd"), ids({259u}));
  // The pattern cuts first: "ab cd" -> "ab", " cd".
  EXPECT_EQ(tok->encode("ab cd"), ids({257u, ' ', 259u}));
  EXPECT_EQ(tok->encode(""), std::vector<uint32_t>{});
  EXPECT_EQ(tok->decode(tok->encode("abcd ab\ncd!")), "abcd ab\ncd!");
}

TEST(BpeHf, ArrayMergesEqualStringMerges) {
  TempDir tmp;
  auto a = load_hf(tmp, tiny_hf(false, false), "a.json");
  auto b = load_hf(tmp, tiny_hf(true, false), "b.json");
  for (const char* text : {"abcd", "aaaaab", "cdcdab ab c", "34 1234 3434"}) EXPECT_EQ(a->encode(text), b->encode(text)) << text;
}

TEST(BpeHf, IgnoreMergesTakesWholeTokens) {
  TempDir tmp;
  auto tok = load_hf(tmp, tiny_hf(false, true));
  EXPECT_EQ(tok->encode("abcd"), ids({262u}));  // in the vocabulary: no merging
  EXPECT_EQ(tok->encode("abcda"), ids({258u, 'd', 'a'}));
}

TEST(BpeHf, AddedTokensAreSpecialsNeverProducedByEncode) {
  TempDir tmp;
  auto tok = load_hf(tmp, tiny_hf(false, false));
  EXPECT_EQ(tok->find_special("<|end|>"), 400u);
  EXPECT_EQ(tok->find_special("<|plain_added|>"), 401u);
  EXPECT_FALSE(tok->find_special("<|nope|>").has_value());
  EXPECT_EQ(tok->vocab_size(), 402);
  std::vector<uint32_t> got = tok->encode("x<|end|>y");
  for (uint32_t id : got) EXPECT_LT(id, 300u);
  EXPECT_EQ(tok->decode(got), "x<|end|>y");
  std::vector<uint32_t> with_special = {byte_id('x'), 400, byte_id('y')};
  EXPECT_EQ(tok->decode(with_special), "x<|end|>y");
  std::vector<uint32_t> unknown = {350};
  expect_error([&] { tok->decode(unknown); }, {"id 350"});
}

TEST(BpeHf, Gpt2ByteLevelPattern) {
  TempDir tmp;
  json pre = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}};
  auto gpt2 = load_hf(tmp, tiny_hf(false, false, pre), "gpt2.json");
  auto o200k = load_hf(tmp, tiny_hf(false, false), "o200k.json");
  EXPECT_EQ(gpt2->pattern(), kGpt2Pattern);
  // GPT-2 keeps "1234" whole (then 3 4 merges); o200k cuts digits in threes: 123 | 4.
  EXPECT_EQ(gpt2->encode("1234"), ids({'1', '2', 261u}));
  EXPECT_EQ(o200k->encode("1234"), ids({'1', '2', '3', '4'}));
}

TEST(BpeHf, SplitBehaviours) {
  // Isolated keeps the text between matches as pieces; Removed with invert keeps only the matches
  // (tiktoken's find_iter). With a pattern that leaves gaps the two differ.
  TempDir tmp;
  json isolated = o200k_pre_tokenizer(), removed = o200k_pre_tokenizer();
  isolated["pretokenizers"][0]["pattern"]["Regex"] = "[a-z]+";
  removed["pretokenizers"][0]["pattern"]["Regex"] = "[a-z]+";
  removed["pretokenizers"][0]["behavior"] = "Removed";
  removed["pretokenizers"][0]["invert"] = true;
  auto keep = load_hf(tmp, tiny_hf(false, false, isolated), "isolated.json");
  auto drop = load_hf(tmp, tiny_hf(false, false, removed), "removed.json");
  EXPECT_EQ(keep->encode("ab, cd"), ids({257u, ',', ' ', 259u}));
  EXPECT_EQ(drop->encode("ab, cd"), ids({257u, 259u}));
  // With the o200k pattern there are no gaps: the same ids.
  json o200k_removed = o200k_pre_tokenizer();
  o200k_removed["pretokenizers"][0]["behavior"] = "Removed";
  o200k_removed["pretokenizers"][0]["invert"] = true;
  auto a = load_hf(tmp, tiny_hf(false, false), "a.json");
  auto b = load_hf(tmp, tiny_hf(false, false, o200k_removed), "b.json");
  EXPECT_EQ(a->encode("ab cd, 1234!\n  x"), b->encode("ab cd, 1234!\n  x"));
}

TEST(BpeHf, InvalidUtf8BecomesReplacementCharacter) {
  TempDir tmp;
  auto tok = load_hf(tmp, tiny_hf(false, false));
  EXPECT_EQ(tok->encode("ab\xFF" "cd"), tok->encode("ab\xEF\xBF\xBD" "cd"));
  EXPECT_EQ(tok->decode(tok->encode("a\xC3")), "a\xEF\xBF\xBD");
}

TEST(BpeHf, RefusesWhatItWouldEncodeDifferently) {
  TempDir tmp;
  auto refuse = [&](const std::function<void(json&)>& edit, std::initializer_list<std::string> needles) {
    json j = tiny_hf(false, false);
    edit(j);
    expect_error([&] { load_hf(tmp, j, "bad.json"); }, needles);
  };
  refuse([](json& j) { j["normalizer"] = {{"type", "NFC"}}; }, {"normalizer", "NFC"});
  refuse([](json& j) { j["model"]["dropout"] = 0.1; }, {"dropout"});
  refuse([](json& j) { j["model"]["byte_fallback"] = true; }, {"byte_fallback"});
  refuse([](json& j) { j["model"]["type"] = "WordPiece"; }, {"WordPiece"});
  refuse([](json& j) { j["model"]["continuing_subword_prefix"] = "##"; }, {"continuing_subword_prefix"});
  refuse([](json& j) { j["pre_tokenizer"] = {{"type", "Metaspace"}}; }, {"Metaspace"});
  refuse([](json& j) { j["pre_tokenizer"] = {{"type", "ByteLevel"}, {"add_prefix_space", true}}; }, {"add_prefix_space"});
  refuse([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed"; }, {"Removed", "invert false"});
  refuse([](json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithNext"; }, {"MergedWithNext"});
  refuse([](json& j) { j["model"]["merges"].push_back("zz q"); }, {"merges[6]"});
  refuse([](json& j) { j["model"]["merges"].push_back("a b c"); }, {"merges[6]"});
  refuse([](json& j) { j["model"]["merges"].push_back("c a"); }, {"merges[6]", "not in the vocabulary"});
  refuse([](json& j) { j["model"]["vocab"].erase(byte_level("\x01")); }, {"0x01"});
  write_file_atomic(tmp.sub("broken.json"), "{\"model\": ");
  expect_error([&] { BpeTokenizer::from_hf_json(tmp.sub("broken.json")); }, {"broken.json", "malformed JSON"});
}

// ---- tiktoken rank files

using test::base64;

// Bytes at ranks 0..255 (by value), then kMerged in order from 256.
std::string tiny_ranks(bool with_abcd = true) {
  std::string out;
  for (int b = 0; b < 256; ++b) out += base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  for (const auto& [bytes, id] : kMerged) {
    if (with_abcd || bytes != "abcd") out += base64(bytes) + " " + std::to_string(id) + "\n";
  }
  return out;
}

TEST(BpeTiktoken, RanksMergeByConcatenation) {
  TempDir tmp;
  write_file_atomic(tmp.sub("tiny.tiktoken"), tiny_ranks());
  auto tok = BpeTokenizer::from_tiktoken(tmp.sub("tiny.tiktoken"), {{"<|end|>", 300}});
  EXPECT_EQ(tok->kind(), "tiktoken");
  EXPECT_EQ(tok->vocab_size(), 301);
  EXPECT_EQ(tok->encode("abcd"), (std::vector<uint32_t>{262}));  // the whole piece is a token
  // Unlike the merges list, any split of a token merges: abc + d -> abcd (rank 262).
  EXPECT_EQ(tok->encode("abcda"), (std::vector<uint32_t>{262, 'a'}));
  EXPECT_EQ(tok->encode("aaa"), (std::vector<uint32_t>{260, 'a'}));
  EXPECT_EQ(tok->special_id("<|end|>"), 300u);
  EXPECT_EQ(tok->decode(std::vector<uint32_t>{258, 300, ' '}), "abc<|end|> ");
  // Every split into two tokens: b+c, a+b, a+bc, ab+c, c+d, a+a, 3+4, ab+cd, abc+d.
  EXPECT_EQ(tok->core().pair_count(), 9u);
}

TEST(BpeTiktoken, AgreesWithTheSameVocabularyAsTokenizerJson) {
  TempDir tmp;
  // Without "abcd" every token has one split into tokens, so the merges list says all.
  write_file_atomic(tmp.sub("tiny.tiktoken"), tiny_ranks(false));
  auto tt = BpeTokenizer::from_tiktoken(tmp.sub("tiny.tiktoken"), {});
  // Same ids as the rank file: bytes by value; ignore_merges as tiktoken looks whole pieces up.
  auto hf = load_hf(tmp, tiny_hf(false, true, o200k_pre_tokenizer(), [](char c) { return uint32_t(uint8_t(c)); }, false));
  SplitMix64 rng(3);
  const std::string alphabet = "abcd34 \n\t.";
  for (int i = 0; i < 300; ++i) {
    std::string text;
    for (uint64_t n = rng.below(40); n > 0; --n) text += alphabet[rng.below(alphabet.size())];
    EXPECT_EQ(tt->encode(text), hf->encode(text)) << text;
  }
}

TEST(BpeTiktoken, FileErrorsNameTheLine) {
  TempDir tmp;
  auto load = [&](const std::string& text) {
    write_file_atomic(tmp.sub("r.tiktoken"), text);
    return BpeTokenizer::from_tiktoken(tmp.sub("r.tiktoken"), {});
  };
  expect_error([&] { load(tiny_ranks() + "not*base64 999\n"); }, {"r.tiktoken:264", "base64"});
  expect_error([&] { load(tiny_ranks() + "YWJj\n"); }, {"r.tiktoken:264", "<base64 token> <rank>"});
  expect_error([&] { load(tiny_ranks() + "eHl6 12x\n"); }, {"r.tiktoken:264", "rank"});
  expect_error([&] { load(tiny_ranks() + "eHl6 5\n"); }, {"r.tiktoken:264", "rank 5 appears twice"});
  expect_error([&] { load("YQ== 0\n"); }, {"r.tiktoken", "byte 0x00"});
  expect_error([&] { load(""); }, {"no ranks"});
  write_file_atomic(tmp.sub("ok.tiktoken"), tiny_ranks());
  expect_error([&] { BpeTokenizer::from_tiktoken(tmp.sub("ok.tiktoken"), {{"<|x|>", 5}}); }, {"<|x|>", "rank of the file"});
}

TEST(TokenizerLoader, PicksTheFormatAndSpecials) {
  TempDir tmp;
  write_file_atomic(tmp.sub("tiny.tiktoken"), tiny_ranks());
  write_file_atomic(tmp.sub("tokenizer.json"), tiny_hf(false, false).dump());
  EXPECT_EQ(load_tokenizer("byte")->name(), "quill-byte-v1");
  EXPECT_EQ(load_tokenizer(tmp.sub("tokenizer.json"))->name(), "hf:tokenizer.json");
  auto inkling = load_tokenizer(tmp.sub("tiny.tiktoken"));
  EXPECT_EQ(inkling->special_id("<|message_user|>"), 200000u);
  EXPECT_EQ(inkling->special_id("<|content_invoke_tool_text|>"), 200057u);
  EXPECT_FALSE(inkling->find_special("<|content_invoke_tool|>").has_value());  // no public id
  EXPECT_EQ(inkling->vocab_size(), 200058);
  auto o200k = load_tokenizer(tmp.sub("tiny.tiktoken"), "o200k");
  EXPECT_EQ(o200k->special_id("<|endofprompt|>"), 200018u);
  EXPECT_EQ(load_tokenizer(tmp.sub("tiny.tiktoken"), "none")->vocab_size(), 263);
  write_file_atomic(tmp.sub("sp.json"), R"({"<|a|>": 1000, "<|b|>": 1001})");
  EXPECT_EQ(load_tokenizer(tmp.sub("tiny.tiktoken"), tmp.sub("sp.json"))->special_id("<|b|>"), 1001u);
  EXPECT_NE(inkling->definition_sha256(), o200k->definition_sha256());  // the specials are part of the definition
  expect_error([&] { load_tokenizer(tmp.sub("tiny.tiktoken"), "llama"); }, {"llama"});
  expect_error([&] { load_tokenizer(tmp.sub("tokenizer.json"), "inkling"); }, {"added_tokens"});
  expect_error([&] { load_tokenizer(tmp.sub("missing.json")); }, {"missing.json", "cannot open"});
  nlohmann::json src = tokenizer_source_json(tmp.sub("tiny.tiktoken"));
  EXPECT_EQ(src["special_tokens"], "inkling");
  EXPECT_EQ(src["path"].get<std::string>().front(), '/');
  EXPECT_FALSE(tokenizer_source_json(tmp.sub("tokenizer.json")).contains("special_tokens"));
}

// ---- the merge algorithms against the plain reference

// tiktoken's algorithm on byte strings, written as plainly as possible.
std::vector<uint32_t> reference_merge(const std::map<std::string, uint32_t>& ranks, const std::string& piece) {
  std::vector<std::string> parts;
  for (char c : piece) parts.emplace_back(1, c);
  while (parts.size() > 1) {
    size_t best = 0;
    uint32_t best_rank = BpeCore::kNoId;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      auto it = ranks.find(parts[i] + parts[i + 1]);
      if (it != ranks.end() && it->second < best_rank) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank == BpeCore::kNoId) break;
    parts[best] += parts[best + 1];
    parts.erase(parts.begin() + static_cast<long>(best) + 1);
  }
  std::vector<uint32_t> out;
  for (const std::string& p : parts) out.push_back(ranks.at(p));
  return out;
}

TEST(BpeCore, SmallAndTreeMergesMatchTheReference) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    SplitMix64 rng(seed);
    std::map<std::string, uint32_t> ranks;
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) {
      tokens.emplace_back(1, static_cast<char>(b));
      ranks[tokens.back()] = static_cast<uint32_t>(b);
    }
    std::vector<std::string> pool = {"a", "b", "c", "d", " "};
    while (tokens.size() < 700) {
      std::string t = pool[rng.below(pool.size())] + pool[rng.below(pool.size())];
      if (t.size() > 16 || ranks.count(t)) continue;
      ranks[t] = static_cast<uint32_t>(tokens.size());
      tokens.push_back(t);
      pool.push_back(t);
    }
    // The tables built on one thread and on three (v8) must give the same merges.
    ThreadPool three(3);
    for (ThreadPool* build_pool : {static_cast<ThreadPool*>(nullptr), &three}) {
      BpeCore core = BpeCore::from_ranks(tokens, "random", build_pool);
      const std::string alphabet = "abcd ";
      for (int i = 0; i < 400; ++i) {
        std::string piece;
        uint64_t n = 1 + rng.below(i % 4 == 0 ? 400 : 40);
        for (uint64_t k = 0; k < n; ++k) piece += alphabet[rng.below(alphabet.size())];
        std::vector<uint32_t> want = reference_merge(ranks, piece), small, tree;
        core.merge_piece(piece, small);
        core.merge_piece(piece, tree, /*force_tree=*/true);
        EXPECT_EQ(small, want) << "seed " << seed << " piece " << piece;
        EXPECT_EQ(tree, want) << "seed " << seed << " piece " << piece;
        // encode_piece = whole-piece lookup, else the same merge (cached the second time).
        for (int repeat = 0; repeat < 2; ++repeat) {
          std::vector<uint32_t> enc;
          core.encode_piece(piece, enc);
          auto it = ranks.find(piece);
          EXPECT_EQ(enc, it != ranks.end() ? std::vector<uint32_t>{it->second} : want) << piece;
        }
      }
    }
  }
}

// Two tokens with the same bytes: the same error, naming the first such pair in id order,
// whatever the thread count the tables are built on.
TEST(BpeCore, DuplicateTokensNameTheSamePairOnAnyThreads) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (int i = 0; i < 20000; ++i) tokens.push_back("t" + std::to_string(i));
  tokens[15000] = "t77";  // a duplicate of id 333 ("t77" at 256 + 77)
  tokens[9000] = "t521";  // of id 777: the first duplicate in id order
  for (int threads : {1, 2, 4, 8}) {
    ThreadPool pool(threads);
    expect_error([&] { BpeCore::from_ranks(tokens, "dup", &pool); }, {"dup: tokens 777 and 9000 have the same bytes"});
  }
}

// v5: pieces of a few runs of one byte (whitespace runs) merge on the runs; the result must be the
// per-part algorithm's, for vocabularies whose run tokens have scattered ranks.
TEST(BpeCore, RunMergesMatchTheReference) {
  for (uint64_t seed : {4u, 5u, 6u}) {
    SplitMix64 rng(seed);
    std::map<std::string, uint32_t> ranks;
    std::vector<std::string> tokens;
    for (int b = 0; b < 256; ++b) {
      tokens.emplace_back(1, static_cast<char>(b));
      ranks[tokens.back()] = static_cast<uint32_t>(b);
    }
    // Runs of ' ', '\n', 'a' of random lengths and mixes of them, in random rank order; every
    // split of a token into two tokens is a pair (tiktoken's rule).
    const std::string alphabet = " \na";
    std::vector<std::string> extra;
    for (int len = 2; len <= 40; ++len) {
      for (char c : alphabet) {
        if (rng.below(3) != 0) extra.push_back(std::string(static_cast<size_t>(len), c));
      }
      if (len <= 12 && rng.below(2) == 0) extra.push_back(std::string(static_cast<size_t>(len / 2), ' ') + std::string(static_cast<size_t>(len - len / 2), '\n'));
    }
    for (size_t i = extra.size(); i > 1; --i) std::swap(extra[i - 1], extra[rng.below(i)]);
    for (const std::string& t : extra) {
      if (ranks.count(t)) continue;
      ranks[t] = static_cast<uint32_t>(tokens.size());
      tokens.push_back(t);
    }
    BpeCore core = BpeCore::from_ranks(tokens, "runs");
    for (int i = 0; i < 300; ++i) {
      std::string piece;
      size_t runs = 1 + rng.below(i % 3 == 0 ? 6 : 3);
      for (size_t r = 0; r < runs; ++r) {
        piece += std::string(1 + rng.below(i % 10 == 0 ? 700 : 60), alphabet[rng.below(alphabet.size())]);
      }
      std::vector<uint32_t> want = reference_merge(ranks, piece), got, tree;
      core.merge_piece(piece, got);
      core.merge_piece(piece, tree, /*force_tree=*/true);
      EXPECT_EQ(got, want) << "seed " << seed << " piece of " << piece.size();
      EXPECT_EQ(tree, want) << "seed " << seed << " piece of " << piece.size();
    }
  }
}

}  // namespace
}  // namespace quill
