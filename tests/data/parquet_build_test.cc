// `quill data build` from Parquet: the rows and the manifest are byte-identical to a build from
// the same conversations as JSONL (except the manifest's `input` and `source`), for every
// fixture, for the two-file split read in order, at 1 and 2 threads, with --max-rows and with
// --skip-invalid; the expected parquet_sha256 / parquet_bytes of a recipe are checked.
#include <gtest/gtest.h>

#include <filesystem>

#include "base/file_util.h"
#include "data/build_rows.h"
#include "data/byte_tokenizer.h"
#include "data/tokenizer_loader.h"
#include "data_test_util.h"
#include "o200k_test_util.h"
#include "parquet_test_util.h"
#include "parquet_test_writer.h"

namespace quill {
namespace {

using test::expect_error;
using test::parquet_fixture;
using test::TempDir;

BuildOptions options(int threads, int64_t row_tokens = 64, int64_t max_rows = -1) {
  return test::build_options(threads, row_tokens, max_rows);
}

// The manifest without the fields that name the input.
std::string without_input(nlohmann::json manifest) {
  manifest.erase("input");
  manifest.erase("source");
  return manifest.dump();
}

void expect_same_build(const std::vector<std::string>& parquet, const std::string& jsonl, const Tokenizer& tok,
                       const BuildOptions& o, const std::string& label) {
  TempDir tmp;
  nlohmann::json a = build_rows_from_inputs({jsonl}, tok, o, tmp.sub("jsonl"));
  nlohmann::json b = build_rows_from_inputs(parquet, tok, o, tmp.sub("parquet"));
  EXPECT_GT(a["rows"].get<int64_t>(), 0) << label;
  EXPECT_TRUE(read_file(tmp.sub("jsonl/rows.bin")) == read_file(tmp.sub("parquet/rows.bin"))) << label;
  EXPECT_EQ(without_input(a), without_input(b)) << label;
  // The manifests on disk too (what the rows directory holds), input aside.
  nlohmann::json da = nlohmann::json::parse(read_file(tmp.sub("jsonl/manifest.json")));
  nlohmann::json db = nlohmann::json::parse(read_file(tmp.sub("parquet/manifest.json")));
  EXPECT_EQ(without_input(da), without_input(db)) << label;
  EXPECT_EQ(db["input"]["format"], "parquet");
  int64_t bytes = 0;
  std::string all;
  for (const std::string& p : parquet) all += read_file(p);
  bytes = static_cast<int64_t>(all.size());
  EXPECT_EQ(db["input"]["bytes"].get<int64_t>(), bytes) << label;
  EXPECT_EQ(db["input"]["parquet_sha256"], sha256_hex(all)) << label;
  EXPECT_EQ(db["input"]["rows"].get<int64_t>(), 153) << label;
}

TEST(ParquetBuild, EveryFixtureBuildsTheJsonlRows) {
  ByteTokenizer tok;
  std::string jsonl = parquet_fixture("conversations.jsonl");
  for (int threads : {1, 2}) {
    for (const std::string& name : test::parquet_fixture_files()) {
      expect_same_build({parquet_fixture(name)}, jsonl, tok, options(threads, 128),
                        name + " threads " + std::to_string(threads));
    }
    expect_same_build({parquet_fixture("part-0.parquet"), parquet_fixture("part-1.parquet")}, jsonl, tok,
                      options(threads, 128), "part-0 + part-1 threads " + std::to_string(threads));
    expect_same_build({parquet_fixture("arrow-rs-zstd-v2-fallback.parquet")}, jsonl, tok, options(threads, 128),
                      "arrow-rs threads " + std::to_string(threads));
  }
  // --max-rows: both stop at the same conversation.
  expect_same_build({parquet_fixture("zstd-v2.parquet")}, jsonl, tok, options(2, 96, 7), "max_rows 7");
}

TEST(ParquetBuild, O200kTokenizerToo) {
  std::string ranks = test::find_o200k_ranks();
  if (ranks.empty()) GTEST_SKIP() << test::kNoO200kRanks;
  std::unique_ptr<Tokenizer> tok = load_tokenizer(ranks, "inkling");
  std::string jsonl = parquet_fixture("conversations.jsonl");
  expect_same_build({parquet_fixture("snappy-v1.parquet")}, jsonl, *tok, options(2, 512), "o200k snappy-v1");
  expect_same_build({parquet_fixture("part-0.parquet"), parquet_fixture("part-1.parquet")}, jsonl, *tok,
                    options(1, 512), "o200k parts");
}

TEST(ParquetBuild, SkipInvalidSkipsWhatJsonlSkips) {
  using test::TestMessage;
  using test::TestRow;
  auto msg = [](std::optional<std::string> role, std::optional<std::string> content) {
    return std::optional<TestMessage>(TestMessage{std::move(content), std::move(role)});
  };
  std::vector<TestRow> rows;
  std::string jsonl;
  for (int i = 0; i < 60; ++i) {
    std::string q = "question " + std::to_string(i) + " " + std::string(static_cast<size_t>(i % 7) * 5, 'q');
    std::string a = "answer " + std::to_string(i * 3);
    if (i % 10 == 3) {  // a null role: invalid in both
      rows.push_back({"x", std::vector{msg("user", q), msg(std::nullopt, a)}});
      jsonl += R"({"messages":[{"role":"user","content":")" + q + R"("},{"role":null,"content":")" + a + "\"}]}\n";
    } else if (i % 10 == 7) {  // a null list
      rows.push_back({"x", std::nullopt});
      jsonl += "{\"messages\":null}\n";
    } else {
      rows.push_back({"x", std::vector{msg("user", q), msg("assistant", a)}});
      jsonl += R"({"messages":[{"role":"user","content":")" + q + R"("},{"role":"assistant","content":")" + a + "\"}]}\n";
    }
  }
  TempDir tmp;
  write_file_atomic(tmp.sub("c.parquet"), test::write_test_parquet(rows, 16));
  write_file_atomic(tmp.sub("c.jsonl"), jsonl);
  ByteTokenizer tok;
  BuildOptions o = options(2, 64);
  expect_error([&] { build_rows_from_inputs({tmp.sub("c.parquet")}, tok, o, tmp.sub("fail")); },
               {tmp.sub("c.parquet") + ": row 3 (id x): messages[1]: role is null"});
  EXPECT_FALSE(std::filesystem::exists(tmp.sub("fail/rows.bin")));
  o.skip_invalid = true;
  nlohmann::json a = build_rows_from_inputs({tmp.sub("c.jsonl")}, tok, o, tmp.sub("a"));
  nlohmann::json b = build_rows_from_inputs({tmp.sub("c.parquet")}, tok, o, tmp.sub("b"));
  EXPECT_EQ(a["conversations"]["invalid_skipped"].get<int64_t>(), 12);
  EXPECT_EQ(without_input(a), without_input(b));
  EXPECT_TRUE(read_file(tmp.sub("a/rows.bin")) == read_file(tmp.sub("b/rows.bin")));
}

TEST(ParquetBuild, ExpectedHashAndBytes) {
  ByteTokenizer tok;
  TempDir tmp;
  std::string p = parquet_fixture("snappy-v1.parquet");
  std::string bytes = read_file(p);
  BuildOptions o = options(2, 128);
  o.expected_from = "recipe r.yaml";
  o.expected_parquet_sha256 = sha256_hex(bytes);
  o.expected_parquet_bytes = static_cast<int64_t>(bytes.size());
  EXPECT_NO_THROW(build_rows_from_inputs({p}, tok, o, tmp.sub("ok")));
  o.expected_parquet_bytes = 73787266;
  expect_error([&] { build_rows_from_inputs({p}, tok, o, tmp.sub("bytes")); },
               {p + ": " + std::to_string(bytes.size()) + " bytes, but recipe r.yaml has parquet_bytes 73787266"});
  o.expected_parquet_bytes = -1;
  o.expected_parquet_sha256 = std::string(64, '0');
  expect_error([&] { build_rows_from_inputs({p}, tok, o, tmp.sub("sha")); },
               {p + ": sha256 " + sha256_hex(bytes) + ", but recipe r.yaml has parquet_sha256 " + std::string(64, '0') +
                ": not the recipe's dataset"});
  EXPECT_FALSE(std::filesystem::exists(tmp.sub("sha/rows.bin")));
  // Several files: the hash covers their bytes concatenated in order.
  std::string a = parquet_fixture("part-0.parquet"), b = parquet_fixture("part-1.parquet");
  o.expected_parquet_sha256 = sha256_hex(read_file(a) + read_file(b));
  EXPECT_NO_THROW(build_rows_from_inputs({a, b}, tok, o, tmp.sub("parts")));
  expect_error([&] { build_rows_from_inputs({b, a}, tok, o, tmp.sub("swapped")); }, {b + ", " + a + ": sha256 "});
  // JSONL input with a Parquet expectation is refused.
  expect_error([&] { build_rows_from_inputs({parquet_fixture("conversations.jsonl")}, tok, o, tmp.sub("j")); },
               {"JSONL input, but recipe r.yaml describes Parquet input"});
}

}  // namespace
}  // namespace quill
