// The data build's writer and hash: ParallelRowsWriter, given rows in any order from several
// threads, writes the bytes RowsWriter writes for the same rows in order, and BackgroundSha256
// hashes what Sha256 hashes. A writer destroyed unfinished leaves nothing behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "base/file_util.h"
#include "base/thread_pool.h"
#include "data/rows.h"
#include "data/rows_parallel_writer.h"
#include "base/sha256_stream.h"
#include "data_test_util.h"

namespace quill {
namespace {

using test::TempDir;

TEST(RowsParallelWriter, SameFilesAsRowsWriter) {
  std::mt19937 rng(11);
  for (int64_t T : {1, 3, 64, 1000}) {
    for (int64_t R : {1, 2, 17, 300}) {
      TempDir tmp;
      std::vector<uint32_t> tokens(static_cast<size_t>(R * T));
      std::vector<uint8_t> mask(tokens.size());
      for (size_t i = 0; i < tokens.size(); ++i) {
        tokens[i] = rng() % 200000;
        mask[i] = rng() % 3 == 0;
      }
      nlohmann::json extras = {{"seed", 5}, {"note", "x"}};
      RowsWriter serial(tmp.sub("a"), T);
      Sha256 sha;
      int64_t supervised = 0, max_token = -1;
      for (int64_t r = 0; r < R; ++r) {
        std::span<const uint32_t> t(tokens.data() + r * T, static_cast<size_t>(T));
        std::span<const uint8_t> m(mask.data() + r * T, static_cast<size_t>(T));
        serial.append(t, m);
        sha.update(t.data(), t.size_bytes());
        sha.update(m.data(), m.size_bytes());
        supervised += count_supervised_targets(m);
        max_token = std::max<int64_t>(max_token, *std::max_element(t.begin(), t.end()));
      }
      nlohmann::json want = serial.finish(extras);

      // The same rows in runs of random length, written by 3 threads in any order.
      std::vector<std::pair<int64_t, int64_t>> runs;
      for (int64_t r = 0; r < R;) {
        int64_t k = std::min<int64_t>(R - r, 1 + rng() % 5);
        runs.emplace_back(r, k);
        r += k;
      }
      std::shuffle(runs.begin(), runs.end(), rng);
      ThreadPool pool(3);
      ParallelRowsWriter writer(tmp.sub("b"), T);
      pool.parallel_for(runs.size(), [&](size_t i) {
        auto [first, count] = runs[i];
        writer.write(first, count, tokens.data() + first * T, mask.data() + first * T);
        writer.start_writeback(first, count);
      });
      writer.close_file(R, nullptr);
      nlohmann::json got = writer.install({R, T, supervised, max_token, sha.hex()}, extras);
      EXPECT_EQ(got, want) << T << " " << R;
      EXPECT_TRUE(read_file(tmp.sub("a/rows.bin")) == read_file(tmp.sub("b/rows.bin"))) << T << " " << R;
      EXPECT_EQ(read_file(tmp.sub("a/manifest.json")), read_file(tmp.sub("b/manifest.json")));
      EXPECT_EQ(std::distance(std::filesystem::directory_iterator(tmp.sub("b")), {}), 2) << "temporaries left";
      RowsReader::open(tmp.sub("b"), /*verify_sha256=*/true);
    }
  }
}

TEST(RowsParallelWriter, UnfinishedLeavesNothingAndChecksItsRows) {
  TempDir tmp;
  make_dirs(tmp.sub("out"));
  write_file_atomic(tmp.sub("out/keep.txt"), "x");
  std::vector<uint32_t> tokens(8, 1);
  std::vector<uint8_t> mask(8, 1);
  {
    ParallelRowsWriter writer(tmp.sub("out"), 4);
    writer.write(0, 2, tokens.data(), mask.data());
  }
  {
    ParallelRowsWriter writer(tmp.sub("out"), 4);
    writer.write(0, 2, tokens.data(), mask.data());
    test::expect_error([&] { writer.close_file(3, nullptr); }, {"mask bytes written", "3 rows need 12"});
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(tmp.sub("out")), {}), 1);
  ParallelRowsWriter writer(tmp.sub("out"), 4);
  writer.write(0, 2, tokens.data(), mask.data());
  writer.close_file(2, nullptr);
  test::expect_error([&] { writer.install({2, 4, 6, 1, "00"}, {{"rows", 3}}); }, {"rows is computed by the writer"});
  test::expect_error([] { ParallelRowsWriter(TempDir().sub("o"), 0); }, {"row_tokens must be in [1, 2^32)"});
}

TEST(BackgroundSha256, HashesWhatSha256Hashes) {
  std::string data(1 << 20, '\0');
  std::mt19937 rng(2);
  for (char& c : data) c = static_cast<char>(rng());
  Sha256 direct;
  direct.update(data.data(), data.size());
  std::string want = direct.hex();
  EXPECT_EQ(want, sha256_hex(data));
  BackgroundSha256 background;
  uint64_t last = 0;
  for (size_t at = 0; at < data.size();) {
    size_t n = std::min<size_t>(data.size() - at, 1 + rng() % 100000);
    last = background.push([p = data.data() + at, n](Sha256& sha) { sha.update(p, n); });
    at += n;
  }
  background.wait(last);
  EXPECT_EQ(background.hex(), want);
  BackgroundSha256 failing;
  uint64_t t = failing.push([](Sha256&) { QUILL_FAIL("job failed"); });
  test::expect_error([&] { failing.wait(t); }, {"job failed"});
}

}  // namespace
}  // namespace quill
