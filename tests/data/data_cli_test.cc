// `quill data build | inspect | encode | decode | bench-encode` through the executable (the
// library behind them has its own tests). Skips when the quill binary has not been built.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "data/synthetic.h"
#include "data_test_util.h"

namespace quill {
namespace {

using test::TempDir;

struct Result {
  int status;
  std::string out;  // stdout and stderr together
};

Result run(const std::string& args) {
  std::string cmd = std::string(QUILL_BINARY) + " " + args + " 2>&1";
  Result r{-1, ""};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 4096> buf;
  for (size_t n; (n = std::fread(buf.data(), 1, buf.size(), p)) > 0;) r.out.append(buf.data(), n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

class DataCli : public ::testing::Test {
  void SetUp() override {
    if (!std::filesystem::exists(QUILL_BINARY)) GTEST_SKIP() << QUILL_BINARY << " is not built";
  }
};

TEST_F(DataCli, EncodeDecodeByteTokenizer) {
  TempDir tmp;
  write_file_atomic(tmp.sub("in.txt"), "Hi<|end_message|>");
  Result r = run("data encode --tokenizer byte < " + tmp.sub("in.txt"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out, "[72,105,60,124,101,110,100,95,109,101,115,115,97,103,101,124,62]\n");
  write_file_atomic(tmp.sub("ids.json"), "[72, 105, 265]");
  r = run("data decode --tokenizer byte < " + tmp.sub("ids.json"));
  EXPECT_EQ(r.out, "Hi<|end_message|>");
}

TEST_F(DataCli, BuildInspectAndErrors) {
  TempDir tmp;
  std::string jsonl = conversations_to_jsonl(generate_synthetic_conversations(300, 1));
  write_file_atomic(tmp.sub("in.jsonl"), jsonl);
  std::string common = " --tokenizer byte --row-tokens 128 --seed 9 --quiet";
  Result r = run("data build --input " + tmp.sub("in.jsonl") + common + " --threads 3 --out " + tmp.sub("a"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("MB/s end to end"), std::string::npos) << r.out;
  r = run("data build --input " + tmp.sub("in.jsonl") + common + " --threads 1 --out " + tmp.sub("b"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(read_file(tmp.sub("a/rows.bin")) == read_file(tmp.sub("b/rows.bin")));

  r = run("data inspect " + tmp.sub("a") + " --row 1 --tokens 200 --color never");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"rows_sha256\""), std::string::npos);
  EXPECT_NE(r.out.find("--- row 1: first 128 of 128 tokens"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("]]"), std::string::npos) << r.out;

  write_file_atomic(tmp.sub("bad.jsonl"), jsonl + "{\"messages\": [{\"role\": \"robot\", \"content\": \"x\"}]}\n");
  r = run("data build --input " + tmp.sub("bad.jsonl") + common + " --out " + tmp.sub("c"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("bad.jsonl:301: messages[0]: unknown role \"robot\""), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(tmp.sub("c/rows.bin")));
  r = run("data build --input " + tmp.sub("bad.jsonl") + common + " --skip-invalid --out " + tmp.sub("c"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("\"invalid_skipped\": 1"), std::string::npos) << r.out;
}

// --timing: the breakdown as a table and as one JSON line; the rows are the same as without it.
TEST_F(DataCli, BuildTiming) {
  TempDir tmp;
  write_file_atomic(tmp.sub("in.jsonl"), conversations_to_jsonl(generate_synthetic_conversations(300, 1)));
  std::string common = "data build --input " + tmp.sub("in.jsonl") + " --tokenizer byte --row-tokens 128 --quiet --threads 2";
  Result timed = run(common + " --timing --out " + tmp.sub("a")), plain = run(common + " --out " + tmp.sub("b"));
  ASSERT_EQ(timed.status, 0) << timed.out;
  ASSERT_EQ(plain.status, 0) << plain.out;
  EXPECT_TRUE(read_file(tmp.sub("a/rows.bin")) == read_file(tmp.sub("b/rows.bin")));
  EXPECT_EQ(plain.out.find("data build timing"), std::string::npos) << plain.out;
  EXPECT_NE(timed.out.find("tokenizer load"), std::string::npos) << timed.out;
  const std::string prefix = "quill: data build timing ";
  size_t at = timed.out.find(prefix);
  ASSERT_NE(at, std::string::npos) << timed.out;
  size_t eol = timed.out.find('\n', at);
  nlohmann::json j = nlohmann::json::parse(timed.out.substr(at + prefix.size(), eol - at - prefix.size()));
  EXPECT_EQ(j["threads"], 2);
  double sum = 0;
  for (const auto& p : j["phases"]) sum += p["s"].get<double>();
  EXPECT_NEAR(sum, j["total_s"].get<double>(), 1e-6);  // "other" takes what no phase covers
  EXPECT_GT(j["work_s"]["parse"].get<double>(), 0);
  EXPECT_GT(j["work_s"]["tokenize"].get<double>(), 0);
  EXPECT_GT(j["amdahl_16"].get<double>(), 0);
}

TEST_F(DataCli, BenchEncode) {
  TempDir tmp;
  write_file_atomic(tmp.sub("t.txt"), std::string(100000, 'a'));
  Result r = run("data bench-encode --tokenizer byte --input " + tmp.sub("t.txt") + " --repeat 1");
  ASSERT_EQ(r.status, 0) << r.out;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], 100000);
  EXPECT_GT(j["mb_per_s"].get<double>(), 0);
}

// v7: the parallel breakdown, chunk size and output options, and the QUILL_BPE_* cache sizes
// (the child inherits this process's environment): the ids never change.
TEST_F(DataCli, BenchEncodeParallelOptionsAndCacheSizes) {
  TempDir tmp;
  std::string ranks;
  for (int b = 0; b < 256; ++b) ranks += test::base64(std::string(1, static_cast<char>(b))) + " " + std::to_string(b) + "\n";
  ranks += test::base64("ab") + " 256\n" + test::base64("ab ab") + " 257\n";
  write_file_atomic(tmp.sub("r.tiktoken"), ranks);
  std::string text;
  for (int i = 0; i < 5000; ++i) text += i % 3 ? "ab ab\nab\n" : "  ab\n\n";
  write_file_atomic(tmp.sub("t.txt"), text);
  const std::string common = "data bench-encode --tokenizer " + tmp.sub("r.tiktoken") + " --special-tokens none --input " +
                             tmp.sub("t.txt") + " --repeat 1";
  ::unsetenv("QUILL_BPE_FRONT_ENTRIES");
  Result one = run(common + " --threads 1"), three = run(common + " --threads 3 --chunk-kb 1 --fresh-output");
  ASSERT_EQ(one.status, 0) << one.out;
  ASSERT_EQ(three.status, 0) << three.out;
  nlohmann::json a = nlohmann::json::parse(one.out), b = nlohmann::json::parse(three.out);
  EXPECT_EQ(a["ids_sha256"], b["ids_sha256"]);
  EXPECT_EQ(a["caches"]["front_entries"], 65536);
  EXPECT_EQ(b["fresh_output"], true);
  EXPECT_EQ(b["parallel"]["threads"], 3);
  EXPECT_EQ(b["parallel"]["chunk_bytes"], 1024);
  EXPECT_GT(b["parallel"]["chunks"].get<int>(), 10);
  ::setenv("QUILL_BPE_FRONT_ENTRIES", "4096", 1);
  Result small = run(common + " --threads 2 --chunk-kb 1");
  ::setenv("QUILL_BPE_FRONT_ENTRIES", "1000", 1);
  Result bad = run(common);
  ::unsetenv("QUILL_BPE_FRONT_ENTRIES");
  ASSERT_EQ(small.status, 0) << small.out;
  nlohmann::json c = nlohmann::json::parse(small.out);
  EXPECT_EQ(c["caches"]["front_entries"], 4096);
  EXPECT_EQ(c["ids_sha256"], a["ids_sha256"]);
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("QUILL_BPE_FRONT_ENTRIES is 1000"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace quill
