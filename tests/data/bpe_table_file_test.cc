// The table file of a rank file (data/bpe_table_file.h): a core read back is the written core, table
// for table, and looks up what a fresh build looks up; anything that does not match (another rank file, a damaged or torn file, another
// format) is ignored, never trusted and never an error; a folder that cannot be written still
// loads; and the tokenizer, its ids and its errors are the same with and without the file. On a
// random vocabulary (always) and on o200k_base (when scripts/fetch-o200k.sh has fetched it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <type_traits>

#include "base/file_util.h"
#include "base/thread_pool.h"
#include "data/bpe_table_file.h"
#include "data/bpe_tokenizer.h"
#include "data/tokenizer_loader.h"
#include "data/rank_file.h"
#include "data_test_util.h"
#include "o200k_test_util.h"

namespace quill {
namespace {

namespace fs = std::filesystem;
using test::expect_error;

// Every table of a core as bytes, in for_each_table's order.
std::vector<std::string> tables_of(const BpeCore& core) {
  std::vector<std::string> out;
  BpeCore::for_each_table(core, [&](const auto& m) {
    using M = std::remove_cvref_t<decltype(m)>;
    if constexpr (requires { m.data(); m.size(); }) {
      out.emplace_back(reinterpret_cast<const char*>(m.data()), m.size() * sizeof(*m.data()));
    } else {
      out.emplace_back(reinterpret_cast<const char*>(&m), sizeof(M));
    }
  });
  return out;
}

// The same bytes in every table (a core read back against the core that was written). Two
// builds need not be: the parallel builds place colliding keys in the order the threads get to
// them, which changes no lookup; those are compared by what they do (same_lookups).
::testing::AssertionResult same_tables(const BpeCore& a, const BpeCore& b) {
  const auto ta = tables_of(a), tb = tables_of(b);
  if (ta.size() != tb.size()) return ::testing::AssertionFailure() << ta.size() << " vs " << tb.size() << " tables";
  for (size_t i = 0; i < ta.size(); ++i) {
    if (ta[i] == tb[i]) continue;
    size_t at = 0;
    while (at < std::min(ta[i].size(), tb[i].size()) && ta[i][at] == tb[i][at]) ++at;
    return ::testing::AssertionFailure() << "table " << i << " (" << ta[i].size() << " vs " << tb[i].size()
                                         << " bytes) differs at byte " << at;
  }
  return ::testing::AssertionSuccess();
}

// Every token found as itself, and the same ids for (up to 3,000) tokens' bytes doubled and for
// `text` cut into pieces of 1 to 40 bytes (pairs and merges of every kind).
::testing::AssertionResult same_lookups(const BpeCore& a, const BpeCore& b, std::string_view text) {
  if (a.id_count() != b.id_count()) return ::testing::AssertionFailure() << "id counts differ";
  std::vector<std::string> pieces;
  const size_t stride = a.id_count() / 3000 + 1;
  for (uint32_t id = 0; id < a.id_count(); ++id) {
    const std::string_view t = a.token_bytes(id);
    if (t != b.token_bytes(id)) return ::testing::AssertionFailure() << "token " << id << "'s bytes differ";
    if (t.empty()) continue;
    if (b.find_token(t) != id) return ::testing::AssertionFailure() << "token " << id << " not found";
    if (id % stride == 0) pieces.push_back(std::string(t) + std::string(t));
  }
  for (size_t at = 0, n = 1; at < text.size(); at += n, n = n % 40 + 1) pieces.emplace_back(text.substr(at, n));
  // One core after the other: a thread's caches start over whenever the core changes.
  auto encode_all = [&](const BpeCore& core) {
    std::vector<uint32_t> ids;
    for (const std::string& p : pieces) core.encode_piece(p, ids);
    return ids;
  };
  if (encode_all(a) != encode_all(b)) return ::testing::AssertionFailure() << "the pieces encode differently";
  return ::testing::AssertionSuccess();
}

const char* const kText = "tea bet 12345\n\n  T.ab \xC3\xA9\xE4\xB8\xAD<|end|> tt\r\n 1.1.1 beta tee\n";

TableFilePolicy always() { return {true, 0}; }
TableFilePolicy never() { return {false, 0}; }

struct Ranks {
  std::string path, text, sha;
};

Ranks write_ranks(const test::TempDir& tmp, uint64_t seed, const std::string& name = "r.tiktoken") {
  Ranks r{tmp.sub(name), test::random_ranks(seed), ""};
  write_file_atomic(r.path, r.text);
  r.sha = sha256_hex(r.text);
  return r;
}

BpeCore build(const Ranks& r, int threads) {
  ThreadPool pool(threads);
  return BpeCore::from_ranks(parse_rank_file(r.text, r.path, pool), r.path, &pool);
}

std::string bytes_of(const std::string& path) { return read_file(path); }

TEST(BpeTableFile, ReadBackIsTheWrittenCoreWhateverTheThreads) {
  test::TempDir tmp;
  const Ranks r = write_ranks(tmp, 5);
  const std::string file = bpe_table_file_path(r.path);
  EXPECT_EQ(file, r.path + ".quill-tables");
  for (int build_threads : {1, 3}) {
    const BpeCore built = build(r, build_threads);
    ASSERT_TRUE(write_bpe_table_file(file, built, r.sha, r.text.size()));
    for (int threads : {1, 2, 5}) {
      ThreadPool pool(threads);
      std::optional<BpeCore> read = read_bpe_table_file(file, r.sha, r.text.size(), pool);
      ASSERT_TRUE(read.has_value()) << threads << " threads";
      EXPECT_TRUE(same_tables(*read, built)) << "built on " << build_threads << ", read on " << threads << " threads";
      EXPECT_TRUE(same_lookups(*read, build(r, 1), kText));
    }
  }
}

TEST(BpeTableFile, AnythingThatDoesNotMatchIsIgnored) {
  test::TempDir tmp;
  const Ranks r = write_ranks(tmp, 6);
  const std::string file = bpe_table_file_path(r.path);
  ASSERT_TRUE(write_bpe_table_file(file, build(r, 2), r.sha, r.text.size()));
  const std::string good = bytes_of(file);
  ThreadPool pool(2);
  auto read = [&] { return read_bpe_table_file(file, r.sha, r.text.size(), pool).has_value(); };
  ASSERT_TRUE(read());
  // Another rank file: its SHA-256, or its size.
  EXPECT_FALSE(read_bpe_table_file(file, sha256_hex("other"), r.text.size(), pool).has_value());
  EXPECT_FALSE(read_bpe_table_file(file, r.sha, r.text.size() + 1, pool).has_value());
  auto with = [&](const std::string& bytes) {
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    return read();
  };
  // The header's fields: magic, version, byte order, the sources' fingerprint (offset 16).
  for (size_t at : {size_t{0}, size_t{8}, size_t{12}, size_t{16}, size_t{79}}) {
    std::string bad = good;
    bad[at] ^= 0x01;
    EXPECT_FALSE(with(bad)) << "header byte " << at;
  }
  // One bit anywhere in the tables (the checksum), a section's size, a torn or extended file.
  for (size_t at : {good.size() / 3, good.size() / 2, good.size() - 1}) {
    std::string bad = good;
    bad[at] ^= 0x10;
    EXPECT_FALSE(with(bad)) << "byte " << at << " of " << good.size();
  }
  std::string bad_size = good;
  bad_size[168] ^= 0x08;  // the first section's byte count
  EXPECT_FALSE(with(bad_size));
  EXPECT_FALSE(with(good.substr(0, good.size() / 2)));
  EXPECT_FALSE(with(good.substr(0, 100)));
  EXPECT_FALSE(with(good + std::string(8, '\0')));
  EXPECT_FALSE(with(""));
  EXPECT_FALSE(with(std::string(4096, 'x')));
  EXPECT_TRUE(with(good));
  fs::remove(file);
  EXPECT_FALSE(read());
}

TEST(BpeTableFile, TheTokenizerIsTheSameWithAndWithoutIt) {
  test::TempDir tmp;
  const Ranks r = write_ranks(tmp, 7);
  const std::string file = bpe_table_file_path(r.path);
  auto plain = BpeTokenizer::from_tiktoken(r.path, {{"<|end|>", 5000}}, kO200kPattern, 2, never());
  EXPECT_FALSE(fs::exists(file));
  auto first = BpeTokenizer::from_tiktoken(r.path, {{"<|end|>", 5000}}, kO200kPattern, 2, always());
  ASSERT_TRUE(fs::exists(file));  // written by the first load that could
  const auto written = fs::last_write_time(file);
  auto second = BpeTokenizer::from_tiktoken(r.path, {{"<|end|>", 5000}}, kO200kPattern, 1, always());
  EXPECT_EQ(fs::last_write_time(file), written);  // read, not rebuilt
  EXPECT_TRUE(same_tables(second->core(), first->core()));
  EXPECT_TRUE(same_lookups(second->core(), plain->core(), kText));
  const std::string text = kText;
  for (const auto* t : {first.get(), second.get()}) {
    EXPECT_EQ(t->encode(text), plain->encode(text));
    EXPECT_EQ(t->definition_sha256(), plain->definition_sha256());
    EXPECT_EQ(t->vocab_size(), plain->vocab_size());
    EXPECT_EQ(t->find_special("<|end|>"), plain->find_special("<|end|>"));
  }
  // A special token on a rank of the file is refused when the tables come from the file too.
  expect_error([&] { BpeTokenizer::from_tiktoken(r.path, {{"<|x|>", 300}}, kO200kPattern, 1, always()); },
               {"<|x|>", "rank of the file"});
  // The rank file changed: the stale table file is rebuilt, and the new ranks are used.
  const Ranks changed = write_ranks(tmp, 8);
  auto rebuilt = BpeTokenizer::from_tiktoken(changed.path, {}, kO200kPattern, 1, always());
  EXPECT_TRUE(same_lookups(rebuilt->core(), build(changed, 1), kText));
  ThreadPool pool(1);
  EXPECT_TRUE(read_bpe_table_file(file, changed.sha, changed.text.size(), pool).has_value());
}

TEST(BpeTableFile, AFolderThatCannotBeWrittenStillLoads) {
  test::TempDir tmp;
  const Ranks r = write_ranks(tmp, 9);
  const BpeCore built = build(r, 1);
  // Nothing can be created under /proc (not even by root, for whom a read-only mode means nothing).
  EXPECT_FALSE(write_bpe_table_file("/proc/quill-test.quill-tables", built, r.sha, r.text.size()));
  // The table file's name taken by a folder: it can be neither read nor replaced.
  fs::create_directories(bpe_table_file_path(r.path));
  auto tok = BpeTokenizer::from_tiktoken(r.path, {}, kO200kPattern, 2, always());
  EXPECT_TRUE(same_lookups(tok->core(), built, kText));
  EXPECT_TRUE(fs::is_directory(bpe_table_file_path(r.path)));
  for (const auto& e : fs::directory_iterator(tmp.str())) {
    EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << "left behind: " << e.path();
  }
  if (::geteuid() != 0) {  // a read-only folder, where permissions apply
    fs::remove(bpe_table_file_path(r.path));
    fs::permissions(tmp.str(), fs::perms::owner_write, fs::perm_options::remove);
    auto ro = BpeTokenizer::from_tiktoken(r.path, {}, kO200kPattern, 1, always());
    fs::permissions(tmp.str(), fs::perms::owner_write, fs::perm_options::add);
    EXPECT_TRUE(same_lookups(ro->core(), built, kText));
    EXPECT_FALSE(fs::exists(bpe_table_file_path(r.path)));
  }
}

TEST(BpeTableFile, PolicyFromTheEnvironmentAndSmallFiles) {
  ::unsetenv("QUILL_TOKENIZER_CACHE");
  EXPECT_TRUE(TableFilePolicy::from_env().enabled);
  ::setenv("QUILL_TOKENIZER_CACHE", "0", 1);
  EXPECT_FALSE(TableFilePolicy::from_env().enabled);
  ::setenv("QUILL_TOKENIZER_CACHE", "1", 1);
  EXPECT_TRUE(TableFilePolicy::from_env().enabled);
  ::unsetenv("QUILL_TOKENIZER_CACHE");
  // The default leaves small rank files (such as the tests' own) uncached.
  test::TempDir tmp;
  const Ranks r = write_ranks(tmp, 10);
  ASSERT_LT(r.text.size(), TableFilePolicy{}.min_rank_file_bytes);
  BpeTokenizer::from_tiktoken(r.path, {});
  EXPECT_FALSE(fs::exists(bpe_table_file_path(r.path)));
}

TEST(BpeTableFile, O200kReadBackIsTheWrittenCoreAndGivesTiktokensIds) {
  const std::string ranks = test::find_o200k_ranks();
  if (ranks.empty()) GTEST_SKIP() << test::kNoO200kRanks;
  test::TempDir tmp;
  const std::string copy = tmp.sub("o200k_base.tiktoken");
  fs::copy_file(ranks, copy);
  auto built = BpeTokenizer::from_tiktoken(copy, special_token_set("o200k"), kO200kPattern, 2, never());
  auto writes = BpeTokenizer::from_tiktoken(copy, special_token_set("o200k"), kO200kPattern, 2, TableFilePolicy{});
  ASSERT_TRUE(fs::exists(bpe_table_file_path(copy)));
  auto reads = BpeTokenizer::from_tiktoken(copy, special_token_set("o200k"), kO200kPattern, 1, TableFilePolicy{});
  EXPECT_TRUE(same_tables(reads->core(), writes->core()));
  const std::string text = read_file(test::tokenizer_fixture("o200k_corpus.txt"));
  EXPECT_TRUE(same_lookups(reads->core(), built->core(), std::string_view(text).substr(0, 200000)));
  const test::Golden golden = test::read_golden(test::tokenizer_fixture("o200k_corpus.txt.o200k_ids"));
  EXPECT_EQ(reads->encode(text), golden.ids);
  EXPECT_EQ(reads->definition_sha256(), built->definition_sha256());
}

}  // namespace
}  // namespace quill
