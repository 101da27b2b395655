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
#include "data/ids_json.h"
#include "data_test_util.h"
#include "o200k_test_util.h"

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

// `data encode` on the 1.1 MB mixed corpus prints exactly tiktoken's ids in the JSON it always
// printed ("[a,b,...]\n", as nlohmann::json dumps the array), on one thread and on three.
TEST_F(DataCli, EncodeO200kPrintsTiktokensIdsAsBefore) {
  std::string ranks = test::find_o200k_ranks();
  if (ranks.empty()) GTEST_SKIP() << test::kNoO200kRanks;
  std::string input = test::tokenizer_fixture("o200k_corpus.txt"), golden = input + ".o200k_ids";
  if (!path_exists(golden)) GTEST_SKIP() << golden << " is missing (docs/tokenizer.md)";
  test::Golden g = test::read_golden(golden);
  const std::string want = nlohmann::json(g.ids).dump() + "\n";
  for (const char* threads : {"1", "3"}) {
    Result r = run("data encode --tokenizer " + ranks + " --special-tokens o200k --threads " + threads + " < " + input);
    ASSERT_EQ(r.status, 0) << r.out.substr(0, 500);
    EXPECT_TRUE(r.out == want) << "--threads " << threads << ": " << r.out.size() << " bytes, want " << want.size();
  }
  Result r = run("data encode --tokenizer " + ranks + " --threads -1 < " + input);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("--threads -1: expected 0 (all cores) or more"), std::string::npos) << r.out;
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

// Issue 44: a second `data synth` or `data build` into the same --out silently replaced the rows (or
// mixed its files into any non-empty directory, a run directory say). A non-empty --out is refused in one
// line naming it and --overwrite, before any work, and left as it was; with --overwrite the new rows replace
// the old whole, and no side directory is left.
TEST_F(DataCli, NonEmptyOutIsRefusedUnlessOverwrite) {
  TempDir tmp;
  const std::string rows = tmp.sub("rows");
  const std::string synth = "data synth --conversations 30 --row-tokens 64 --out " + rows;
  Result r = run(synth);
  ASSERT_EQ(r.status, 0) << r.out;
  const std::string first = read_file(rows + "/rows.bin");
  r = run(synth + " --seed 7");
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("--out " + rows + ": is not empty (it holds earlier output); give --overwrite to replace it"),
            std::string::npos)
      << r.out;
  EXPECT_TRUE(read_file(rows + "/rows.bin") == first);

  // Any non-empty directory, not only rows: a run directory's files stay as they were.
  const std::string run_dir = tmp.sub("run");
  std::filesystem::create_directories(run_dir);
  write_file_atomic(run_dir + "/metrics.jsonl", "{}\n");
  write_file_atomic(tmp.sub("in.jsonl"), conversations_to_jsonl(generate_synthetic_conversations(30, 1)));
  const std::string build = "data build --input " + tmp.sub("in.jsonl") + " --tokenizer byte --row-tokens 64 --quiet";
  r = run(build + " --out " + run_dir);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("--out " + run_dir + ": is not empty"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(run_dir + "/rows.bin"));
  EXPECT_EQ(read_file(run_dir + "/metrics.jsonl"), "{}\n");

  // --overwrite: the new rows replace the old ones whole (the run directory's file is gone with it).
  r = run(synth + " --seed 7 --overwrite");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_FALSE(read_file(rows + "/rows.bin") == first);
  r = run(build + " --overwrite --out " + run_dir);
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(std::filesystem::exists(run_dir + "/manifest.json"));
  EXPECT_FALSE(std::filesystem::exists(run_dir + "/metrics.jsonl"));
  // An empty directory is no earlier output; a failed build leaves it as it was; nothing is left beside.
  std::filesystem::create_directories(tmp.sub("empty"));
  r = run(synth + "-x --input " + tmp.sub("missing.jsonl"));
  EXPECT_EQ(r.status, 1) << r.out;
  r = run("data synth --conversations 30 --row-tokens 64 --out " + tmp.sub("empty"));
  ASSERT_EQ(r.status, 0) << r.out;
  for (const auto& e : std::filesystem::directory_iterator(tmp.str()))
    EXPECT_EQ(e.path().filename().string().find(".tmp-"), std::string::npos) << e.path();
  EXPECT_FALSE(std::filesystem::exists(rows + "-x"));
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


// Parquet input through the executable: several --input files in order, the rows equal to the
// JSONL twin's, and --recipe checking the recipe's parquet_sha256 / parquet_bytes.
TEST_F(DataCli, BuildFromParquetWithRecipeCheck) {
  TempDir tmp;
  const std::string dir = std::string(QUILL_SOURCE_DIR) + "/tests/data/fixtures/parquet/";
  const std::string part0 = dir + "part-0.parquet", part1 = dir + "part-1.parquet";
  std::string common = " --tokenizer byte --row-tokens 128 --quiet --threads 2";
  Result r = run("data build --input " + dir + "conversations.jsonl" + common + " --out " + tmp.sub("j"));
  ASSERT_EQ(r.status, 0) << r.out;
  r = run("data build --input " + part0 + " --input " + part1 + common + " --out " + tmp.sub("p"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(read_file(tmp.sub("j/rows.bin")) == read_file(tmp.sub("p/rows.bin")));
  r = run("data build --input " + part0 + " " + part1 + common + " --out " + tmp.sub("p2"));  // one --input, two files
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(read_file(tmp.sub("j/rows.bin")) == read_file(tmp.sub("p2/rows.bin")));
  nlohmann::json m = nlohmann::json::parse(read_file(tmp.sub("p/manifest.json")));
  std::string sha = sha256_hex(read_file(part0) + read_file(part1));
  EXPECT_EQ(m["input"]["parquet_sha256"], sha);
  EXPECT_EQ(m["source"], part0 + ", " + part1);

  // The seed recipe with the fixture's hash and size in place of Tulu 3's.
  std::string seed = read_file(std::string(QUILL_FIXTURES) + "/recipes/seed.yaml");
  const std::string seed_sha = "1e04d74348ceef56499d0c9ffea0e5f2f52cb0b9552ee719362e185d44058df2";
  ASSERT_NE(seed.find(seed_sha), std::string::npos);
  std::string ours = seed;
  ours.replace(ours.find(seed_sha), seed_sha.size(), sha);
  ours.replace(ours.find("parquet_bytes: 73787266"), 23,
               "parquet_bytes: " + std::to_string(read_file(part0).size() + read_file(part1).size()));
  write_file_atomic(tmp.sub("ours.yaml"), ours);
  r = run("data build --input " + part0 + " --input " + part1 + common + " --recipe " + tmp.sub("ours.yaml") +
          " --out " + tmp.sub("r"));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(read_file(tmp.sub("j/rows.bin")) == read_file(tmp.sub("r/rows.bin")));
  // The files in the other order: the same size, another hash.
  r = run("data build --input " + part1 + " --input " + part0 + common + " --recipe " + tmp.sub("ours.yaml") +
          " --out " + tmp.sub("bad"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(part1 + ", " + part0 + ": sha256 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("has parquet_sha256 " + sha + ": not the recipe's dataset"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(tmp.sub("bad/rows.bin")));
  // The seed itself: Tulu 3's size is not the fixture's.
  write_file_atomic(tmp.sub("seed.yaml"), seed);
  r = run("data build --input " + part0 + common + " --recipe " + tmp.sub("seed.yaml") + " --out " + tmp.sub("bad"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("has parquet_bytes 73787266: not the recipe's dataset"), std::string::npos) << r.out;
  // A recipe without a parquet_sha256 cannot check anything.
  std::string tiny = std::string(QUILL_SOURCE_DIR) + "/recipes/tiny-cpu.yaml";
  r = run("data build --input " + part0 + common + " --recipe " + tiny + " --out " + tmp.sub("bad"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(tiny + ": the recipe records no workload.dataset.build.parquet_sha256"), std::string::npos)
      << r.out;
  // A truncated file: one error naming it.
  write_file_atomic(tmp.sub("cut.parquet"), read_file(part0).substr(0, 3000));
  r = run("data build --input " + tmp.sub("cut.parquet") + common + " --out " + tmp.sub("bad"));
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find(tmp.sub("cut.parquet") + ": truncated Parquet file"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace quill
