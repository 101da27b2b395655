// `quill data build` from JSONL: the output does not depend on the thread count, matches the
// in-memory build, stops rendering at max_rows, and bad lines stop the build with file:line (or
// are skipped and counted), leaving no rows file behind.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/file_util.h"
#include "data/build_rows.h"
#include "data/byte_tokenizer.h"
#include "data/chat_render.h"
#include "data/row_view.h"
#include "data/rows.h"
#include "data/synthetic.h"
#include "data/tokenizer_loader.h"
#include "data_test_util.h"
#include "o200k_test_util.h"

namespace quill {
namespace {

using test::expect_error;
using test::TempDir;

BuildOptions options(int threads, int64_t row_tokens = 64, int64_t max_rows = -1) {
  return test::build_options(threads, row_tokens, max_rows);
}

std::string synthetic_jsonl(int n) { return conversations_to_jsonl(generate_synthetic_conversations(n, 7)); }

TEST(BuildRows, SameBytesWhateverTheThreadCount) {
  TempDir tmp;
  write_file_atomic(tmp.sub("in.jsonl"), synthetic_jsonl(1500));
  ByteTokenizer tok;
  std::string rows, manifest;
  for (int threads : {1, 2, 3, 8}) {
    std::string out = tmp.sub("out" + std::to_string(threads));
    build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, options(threads), out);
    if (rows.empty()) {
      rows = read_file(out + "/rows.bin");
      manifest = read_file(out + "/manifest.json");
      continue;
    }
    EXPECT_TRUE(read_file(out + "/rows.bin") == rows) << threads << " threads";
    EXPECT_EQ(read_file(out + "/manifest.json"), manifest) << threads << " threads";
  }
}

TEST(BuildRows, JsonlBuildEqualsTheInMemoryBuild) {
  TempDir tmp;
  write_file_atomic(tmp.sub("in.jsonl"), synthetic_jsonl(400));
  ByteTokenizer tok;
  nlohmann::json a = build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, options(2), tmp.sub("a"));
  nlohmann::json b = build_rows(read_conversations_jsonl(tmp.sub("in.jsonl")), tok, options(1), tmp.sub("b"));
  EXPECT_EQ(a["rows_sha256"], b["rows_sha256"]);
  EXPECT_EQ(a["rows"], b["rows"]);
  EXPECT_EQ(a["conversations"], b["conversations"]);
  EXPECT_EQ(a["packing"], b["packing"]);
  EXPECT_EQ(a["conversations"]["invalid_skipped"], 0);
  EXPECT_EQ(a["input"]["lines"], 400);
  EXPECT_EQ(a["renderer_version"], kRendererVersion);
}

TEST(BuildRows, MaxRowsStopsEarlyWithTheSameFirstRows) {
  TempDir tmp;
  write_file_atomic(tmp.sub("in.jsonl"), synthetic_jsonl(600));
  ByteTokenizer tok;
  build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, options(2), tmp.sub("all"));
  nlohmann::json m = build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, options(3, 64, 7), tmp.sub("seven"));
  EXPECT_EQ(m["rows"], 7);
  EXPECT_EQ(m["packing"]["stopped_at_max_rows"], true);
  EXPECT_LT(m["packing"]["stream_tokens"].get<int64_t>(), 20 * 64);  // it stopped taking conversations
  RowsReader all = RowsReader::open(tmp.sub("all")), seven = RowsReader::open(tmp.sub("seven"), true);
  for (int64_t r = 0; r < 7; ++r) {
    EXPECT_TRUE(std::equal(seven.tokens(r), seven.tokens(r) + 64, all.tokens(r))) << r;
    EXPECT_TRUE(std::equal(seven.mask(r), seven.mask(r) + 64, all.mask(r))) << r;
  }
}

struct BadLine {
  std::string line;
  std::vector<std::string> needles;
};

const std::vector<BadLine>& bad_lines() {
  static const std::vector<BadLine> lines = {
      {R"({"messages": [{"role": "user", "content": "unterminated})", {"malformed JSON"}},
       {R"({"messages": [{"role": "wizard", "content": "x"}]})", {"unknown role", "wizard"}},
       {R"({"messages": [{"role": "user"}]})", {"missing content"}},
       {"{\"messages\": [{\"role\": \"user\", \"content\": \"bad \xC3\x28 byte\"}]}", {"invalid UTF-8", "byte 48"}},
       {R"({"messages": [{"role": "user", "content": "q"}], "tools": [{"description": "no name"}]})", {"tools[0]", "name"}},
       {R"([1, 2, 3])", {"must be a JSON object"}},
   };
  return lines;
}

TEST(BuildRows, BadLineStopsTheBuildWithFileAndLine) {
  ByteTokenizer tok;
  std::string good = synthetic_jsonl(300);
  for (const BadLine& bad : bad_lines()) {
    TempDir tmp;
    // The bad line is line 101, after 100 good ones and a blank line in between (blank lines count).
    std::string text;
    size_t pos = 0;
    for (int i = 0; i < 99; ++i) pos = good.find('\n', pos) + 1;
    text = good.substr(0, pos) + "\n" + bad.line + "\n" + good.substr(pos);
    write_file_atomic(tmp.sub("in.jsonl"), text);
    std::vector<std::string> needles = bad.needles;
    needles.push_back(tmp.sub("in.jsonl") + ":101: ");
    try {
      build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, options(3), tmp.sub("out"));
      ADD_FAILURE() << "no error for " << bad.line;
    } catch (const Error& e) {
      for (const std::string& n : needles) EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
    }
    EXPECT_FALSE(std::filesystem::exists(tmp.sub("out/rows.bin"))) << bad.line;
    EXPECT_FALSE(std::filesystem::exists(tmp.sub("out/manifest.json"))) << bad.line;
    if (std::filesystem::exists(tmp.sub("out"))) {
      EXPECT_TRUE(std::filesystem::is_empty(tmp.sub("out"))) << "temporaries left behind";
    }
  }
}

TEST(BuildRows, FirstBadLineIsReportedWhateverTheThreads) {
  TempDir tmp;
  std::string good = synthetic_jsonl(2000);
  std::string text;
  size_t pos = 0;
  for (int i = 1; pos < good.size(); ++i) {
    size_t eol = good.find('\n', pos) + 1;
    text += (i == 1700 || i == 1900) ? std::string("{oops}\n") : good.substr(pos, eol - pos);
    pos = eol;
  }
  write_file_atomic(tmp.sub("in.jsonl"), text);
  ByteTokenizer tok;
  for (int threads : {1, 4, 16}) {
    expect_error([&] { build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, options(threads), tmp.sub("out")); },
                 {"in.jsonl:1700:"});
  }
}

TEST(BuildRows, SkipInvalidCountsBadLines) {
  TempDir tmp;
  std::string text = synthetic_jsonl(300);
  for (const BadLine& bad : bad_lines()) text += bad.line + "\n";
  text += "   \n";  // blank: neither a conversation nor an invalid line
  write_file_atomic(tmp.sub("in.jsonl"), text);
  ByteTokenizer tok;
  BuildOptions o = options(2);
  o.skip_invalid = true;
  nlohmann::json m = build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, o, tmp.sub("out"));
  EXPECT_EQ(m["conversations"]["invalid_skipped"], static_cast<int>(bad_lines().size()));
  EXPECT_EQ(m["conversations"]["input"], 300);
  // The same rows as the good lines alone.
  write_file_atomic(tmp.sub("good.jsonl"), synthetic_jsonl(300));
  nlohmann::json g = build_rows_from_jsonl(tmp.sub("good.jsonl"), tok, options(1), tmp.sub("good"));
  EXPECT_EQ(m["rows_sha256"], g["rows_sha256"]);
}

TEST(BuildRows, OtherErrors) {
  TempDir tmp;
  ByteTokenizer tok;
  expect_error([&] { build_rows_from_jsonl(tmp.sub("nope.jsonl"), tok, options(1), tmp.sub("out")); },
               {"nope.jsonl", "cannot open"});
  write_file_atomic(tmp.sub("blank.jsonl"), "\n\n");
  expect_error([&] { build_rows_from_jsonl(tmp.sub("blank.jsonl"), tok, options(1), tmp.sub("out")); },
               {"no valid conversation"});
  write_file_atomic(tmp.sub("in.jsonl"), synthetic_jsonl(5));
  BuildOptions o = options(1, 1 << 20);
  expect_error([&] { build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, o, tmp.sub("out")); }, {"no rows"});
  EXPECT_FALSE(std::filesystem::exists(tmp.sub("out/rows.bin")));
  o = options(1);
  o.reasoning_effort = "extreme";
  expect_error([&] { build_rows_from_jsonl(tmp.sub("in.jsonl"), tok, o, tmp.sub("out")); }, {"extreme"});
}

TEST(BuildRows, ManifestNamesTheTokenizerForInspect) {
  std::string ranks = test::find_o200k_ranks();
  if (ranks.empty()) GTEST_SKIP() << test::kNoO200kRanks;
  TempDir tmp;
  write_file_atomic(tmp.sub("in.jsonl"), synthetic_jsonl(200));
  std::unique_ptr<Tokenizer> tok = load_tokenizer(ranks);
  BuildOptions o = options(2, 256);
  o.tokenizer_source = tokenizer_source_json(ranks);
  nlohmann::json m = build_rows_from_jsonl(tmp.sub("in.jsonl"), *tok, o, tmp.sub("out"));
  EXPECT_EQ(m["tokenizer"]["name"], "tiktoken:o200k_base.tiktoken");
  EXPECT_EQ(m["tokenizer"]["special_tokens"], "inkling");
  EXPECT_EQ(m["tokenizer"]["vocab_size"], 200058);
  EXPECT_EQ(m["tokenizer"]["sha256"], tok->definition_sha256());
  auto reopened = load_tokenizer(m["tokenizer"]["path"], m["tokenizer"]["special_tokens"]);
  EXPECT_EQ(reopened->definition_sha256(), tok->definition_sha256());
  EXPECT_LE(m["max_token_id"].get<int64_t>(), 200057);
  // A row read back with its mask: every supervised run starts after a <|message_model|>.
  RowsReader rows = RowsReader::open(tmp.sub("out"), true);
  std::string view = render_row_for_reading(*reopened, {rows.tokens(0), 256}, {rows.mask(0), 256}, false);
  EXPECT_NE(view.find("<|message_model|>[["), std::string::npos) << view;
  EXPECT_NE(view.find("<|content_model_end_sampling|>]]"), std::string::npos) << view;
}

TEST(RowView, MarksSupervisedSpans) {
  ByteTokenizer tok;
  std::vector<uint32_t> ids = {'h', 'i', 258, 'o', 'k', 263, 'x'};
  std::vector<uint8_t> mask = {0, 0, 0, 1, 1, 1, 0};
  EXPECT_EQ(render_row_for_reading(tok, ids, mask, false), "hi<|message_model|>[[ok<|content_model_end_sampling|>]]x");
  EXPECT_EQ(render_row_for_reading(tok, ids, mask, true),
            "hi<|message_model|>\033[32mok<|content_model_end_sampling|>\033[0mx");
  // A character split over a span boundary shows as U+FFFD, never as broken bytes.
  std::vector<uint32_t> split = {0xC3, 0xA9};
  std::vector<uint8_t> m2 = {0, 1};
  EXPECT_EQ(render_row_for_reading(tok, split, m2, false), "\xEF\xBF\xBD[[\xEF\xBF\xBD]]");
}

}  // namespace
}  // namespace quill
