// The parallel data build (rows_pipeline.h) on the o200k tokenizer and text like the benchmark's
// (conversations cut from the mixed corpus): every output byte the same for 1, 2, 3 and 8
// threads, timed or not; the rows equal to packing.h's serial RowPacker + RowsWriter; and an
// invalid line is reported (or skipped) the same whether the single pass renders it or never
// needs it because of --max-rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <random>

#include "base/file_util.h"
#include "data/build_rows.h"
#include "data/build_timing.h"
#include "data/byte_tokenizer.h"
#include "data/chat_render.h"
#include "data/packing.h"
#include "data/synthetic.h"
#include "data/tokenizer_loader.h"
#include "data_test_util.h"
#include "o200k_test_util.h"

namespace quill {
namespace {

using test::expect_error;
using test::TempDir;

Message message(Role role, std::string content) {
  Message m;
  m.role = role;
  m.content = std::move(content);
  return m;
}

// Conversations cut from the mixed corpus, shaped as bench.py's (make_corpus.py --jsonl: system,
// user and assistant turns, reasoning, tool calls and results, of very different lengths) but an
// eighth as long, so that a test build runs through several windows.
std::string corpus_jsonl(size_t max_bytes) {
  std::string text = read_file(test::tokenizer_fixture("o200k_corpus.txt"));
  std::mt19937 rng(3);
  size_t pos = 0;
  auto take = [&](size_t k) {
    // Cut on a character boundary, so that every piece is valid UTF-8.
    size_t end = std::min(text.size(), pos + k);
    while (end < text.size() && (static_cast<unsigned char>(text[end]) & 0xC0) == 0x80) ++end;
    std::string s = text.substr(pos, end - pos);
    pos = end;
    return s;
  };
  std::vector<Conversation> out;
  size_t bytes = 0;
  while (pos < text.size() && bytes < max_bytes) {
    Conversation c;
    if (rng() % 4 == 0) c.messages.push_back(message(Role::kSystem, take(6 + rng() % 25)));
    for (int turn = 0, turns = 1 + static_cast<int>(rng() % 3); turn < turns; ++turn) {
      c.messages.push_back(message(Role::kUser, take(12 + rng() % 190)));
      Message m = message(Role::kModel, take(25 + rng() % 500));
      if (rng() % 3 == 0) m.reasoning_content = take(12 + rng() % 250);
      if (rng() % 8 == 0) {
        m.tool_calls.push_back({"search", {{"q", take(4 + rng() % 8)}}, "call_" + std::to_string(out.size())});
        c.messages.push_back(m);
        Message result = message(Role::kTool, take(12 + rng() % 100));
        result.tool_call_id = "call_" + std::to_string(out.size());
        c.messages.push_back(result);
        m = message(Role::kModel, take(12 + rng() % 125));
      }
      c.messages.push_back(m);
    }
    for (const Message& m : c.messages) bytes += m.content.size() + m.reasoning_content.size();
    out.push_back(std::move(c));
  }
  return conversations_to_jsonl(out);
}

BuildOptions options(int threads, int64_t row_tokens, int64_t max_rows = -1, uint64_t seed = 42) {
  BuildOptions o;
  o.row_tokens = row_tokens;
  o.max_rows = max_rows;
  o.threads = threads;
  o.seed = seed;
  o.source = "test";
  return o;
}

class BuildRowsO200k : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string ranks = test::find_o200k_ranks();
    if (ranks.empty()) GTEST_SKIP() << test::kNoO200kRanks;
    tok_ = load_tokenizer(ranks, "", 2);
  }
  std::unique_ptr<Tokenizer> tok_;
};

TEST_F(BuildRowsO200k, EveryByteTheSameFor1_2_3_8Threads) {
  TempDir tmp;
  write_file_atomic(tmp.sub("in.jsonl"), corpus_jsonl(600000));
  for (int64_t max_rows : {int64_t{-1}, int64_t{9}}) {
    std::string rows, manifest;
    for (int threads : {1, 2, 3, 8}) {
      for (bool timed : {false, true}) {
        std::string out = tmp.sub(fmt::format("out_{}_{}_{}", max_rows, threads, timed));
        BuildTiming timing;
        BuildOptions o = options(threads, 512, max_rows);
        if (timed) o.timing = &timing;
        nlohmann::json m = build_rows_from_jsonl(tmp.sub("in.jsonl"), *tok_, o, out);
        if (max_rows < 0) {
          EXPECT_GT(m["rows"].get<int64_t>(), 250);
          EXPECT_GT(m["conversations"]["input"].get<int64_t>(), 500);  // several windows on 8 threads
        }
        if (rows.empty()) {
          rows = read_file(out + "/rows.bin");
          manifest = read_file(out + "/manifest.json");
          continue;
        }
        std::string what = fmt::format("{} threads, max_rows {}, timed {}", threads, max_rows, timed);
        EXPECT_TRUE(read_file(out + "/rows.bin") == rows) << what;
        EXPECT_EQ(read_file(out + "/manifest.json"), manifest) << what;
        EXPECT_EQ(std::distance(std::filesystem::directory_iterator(out), {}), 2) << what << ": temporaries left";
      }
    }
  }
}

// The rows and the writer's fields equal what the serial path makes of the same renderings.
TEST_F(BuildRowsO200k, SameRowsAsTheSerialPacker) {
  TempDir tmp;
  std::string jsonl = corpus_jsonl(250000);
  write_file_atomic(tmp.sub("in.jsonl"), jsonl);
  std::vector<Conversation> convs = read_conversations_jsonl(tmp.sub("in.jsonl"));
  ChatRenderer renderer(*tok_);
  std::vector<MaskedTokens> rendered;
  for (const Conversation& c : convs) rendered.push_back(renderer.render(c));
  for (int64_t max_rows : {int64_t{-1}, int64_t{5}}) {
    for (int64_t T : {int64_t{97}, int64_t{4096}}) {
      std::string a = tmp.sub(fmt::format("a_{}_{}", max_rows, T)), b = tmp.sub(fmt::format("b_{}_{}", max_rows, T));
      nlohmann::json got = build_rows_from_jsonl(tmp.sub("in.jsonl"), *tok_, options(3, T, max_rows, 7), a);
      nlohmann::json want = write_packed_rows(b, rendered, PackOptions{7, T, max_rows}, nlohmann::json::object());
      EXPECT_TRUE(read_file(a + "/rows.bin") == read_file(b + "/rows.bin")) << T << " " << max_rows;
      for (const char* key : {"rows", "rows_sha256", "supervised_targets", "supervised_token_ratio", "max_token_id",
                              "conversations", "packing"}) {
        nlohmann::json g = got[key];
        if (g.is_object()) g.erase("invalid_skipped");  // the JSONL build's own field
        EXPECT_EQ(g, want[key]) << key << " " << T << " " << max_rows;
      }
    }
  }
}

// A seed that puts line `bad` (0-based among n) at a permutation position in [lo, hi).
uint64_t seed_placing(int64_t n, int64_t bad, int64_t lo, int64_t hi) {
  for (uint64_t seed = 1;; ++seed) {
    std::vector<int64_t> perm = fisher_yates_permutation(n, seed);
    int64_t at = std::find(perm.begin(), perm.end(), bad) - perm.begin();
    if (at >= lo && at < hi) return seed;
  }
}

// With --max-rows 1 the single pass renders one window (at most 512 conversations on 2 threads)
// and checks the other lines without rendering them; an invalid line there must fail the build
// (or be skipped) exactly as when it is rendered, which abandons the single pass at once.
TEST(BuildRowsParallel, InvalidLineRenderedOrNot) {
  TempDir tmp;
  const int n = 3000;
  std::string good = conversations_to_jsonl(generate_synthetic_conversations(n - 1, 5));
  size_t cut = 0;
  for (int i = 0; i < 2000; ++i) cut = good.find('\n', cut) + 1;
  std::string text = good.substr(0, cut) + "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}\n" + good.substr(cut);
  write_file_atomic(tmp.sub("in.jsonl"), text);  // line 2001 is bad
  write_file_atomic(tmp.sub("good.jsonl"), good);
  ByteTokenizer tok;
  for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, 8}, std::pair<int64_t, int64_t>{1500, n}}) {
    uint64_t seed = seed_placing(n, 2000, lo, hi);
    std::string what = fmt::format("bad line at a permutation position in [{}, {})", lo, hi);
    BuildOptions o = options(2, 64, 1, seed);
    expect_error([&] { build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, o, tmp.sub("out")); },
                 {"in.jsonl:2001: messages[0]: unknown role \"robot\""});
    EXPECT_FALSE(std::filesystem::exists(tmp.sub("out/rows.bin"))) << what;
    if (std::filesystem::exists(tmp.sub("out"))) {
      EXPECT_TRUE(std::filesystem::is_empty(tmp.sub("out"))) << what;
    }
    // Skipped, the rows are those of the good lines alone (whose permutation has n - 1 entries).
    for (int64_t max_rows : {int64_t{1}, int64_t{-1}}) {
      o = options(2, 64, max_rows, seed);
      o.skip_invalid = true;
      nlohmann::json m = build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, o, tmp.sub("skip"));
      nlohmann::json g = build_rows_from_jsonl(tmp.sub("good.jsonl"), tok, options(3, 64, max_rows, seed), tmp.sub("g"));
      EXPECT_EQ(m["conversations"]["invalid_skipped"], 1) << what;
      EXPECT_EQ(m["rows_sha256"], g["rows_sha256"]) << what;
      EXPECT_EQ(m["packing"], g["packing"]) << what;
    }
  }
}

}  // namespace
}  // namespace quill
