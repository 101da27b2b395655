// Rows file: round trip, canonical hash, byte-identical output, and clear errors on damage.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "base/file_util.h"
#include "data/rows.h"
#include "data_test_util.h"

namespace quill {
namespace {

using test::expect_error;
using test::TempDir;

constexpr int64_t kT = 5;
const std::vector<std::vector<uint32_t>> kTokens = {
    {7, 300, 65536, 1, 0}, {9, 8, 7, 6, 5}, {4000000000u, 2, 3, 4, 5}};
const std::vector<std::vector<uint8_t>> kMask = {{1, 1, 0, 1, 1}, {0, 0, 0, 0, 1}, {1, 0, 0, 0, 0}};

nlohmann::json write_sample(const std::string& dir) {
  RowsWriter w(dir, kT);
  for (size_t r = 0; r < kTokens.size(); ++r) w.append(kTokens[r], kMask[r]);
  return w.finish({{"seed", 7}, {"source", "hand-made"}});
}

// The canonical hash input, built independently of rows.cc: per row, LE uint32 ids then masks.
std::string canonical_bytes() {
  std::string bytes;
  for (size_t r = 0; r < kTokens.size(); ++r) {
    for (uint32_t id : kTokens[r]) {
      for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>((id >> (8 * b)) & 0xff));
    }
    for (uint8_t m : kMask[r]) bytes.push_back(static_cast<char>(m));
  }
  return bytes;
}

TEST(Rows, RoundTrip) {
  TempDir tmp;
  nlohmann::json m = write_sample(tmp.str());
  RowsReader r = RowsReader::open(tmp.str(), /*verify_sha256=*/true);
  ASSERT_EQ(r.rows(), 3);
  ASSERT_EQ(r.row_tokens(), kT);
  for (int64_t row = 0; row < 3; ++row) {
    for (int64_t t = 0; t < kT; ++t) {
      EXPECT_EQ(r.tokens(row)[t], kTokens[row][t]);
      EXPECT_EQ(r.mask(row)[t], kMask[row][t]);
    }
  }
  // Targets are positions 1..T-1: row 0 -> 3, row 1 -> 1, row 2 -> 0 (its only 1 is at t=0).
  EXPECT_EQ(r.supervised_targets(0), 3);
  EXPECT_EQ(r.supervised_targets(1), 1);
  EXPECT_EQ(r.supervised_targets(2), 0);
  const nlohmann::json& man = r.manifest();
  EXPECT_EQ(man, m);
  EXPECT_EQ(man["rows"], 3);
  EXPECT_EQ(man["row_tokens"], kT);
  EXPECT_EQ(man["padding_tokens"], 0);
  EXPECT_EQ(man["seed"], 7);
  EXPECT_EQ(man["source"], "hand-made");
  EXPECT_EQ(man["supervised_targets"], 4);
  EXPECT_DOUBLE_EQ(man["supervised_token_ratio"].get<double>(), 4.0 / 15.0);
  EXPECT_EQ(man["max_token_id"], 4000000000u);
  EXPECT_EQ(man["rows_sha256"], sha256_hex(canonical_bytes()));
  EXPECT_EQ(r.compute_rows_sha256(), sha256_hex(canonical_bytes()));
  expect_error([&] { r.tokens(3); }, {"row 3 out of range"});
}

TEST(Rows, FileLayout) {
  TempDir tmp;
  write_sample(tmp.str());
  std::string bytes = read_file(tmp.sub("rows.bin"));
  ASSERT_EQ(bytes.size(), 64u + 5u * 3 * kT);
  EXPECT_EQ(bytes.substr(0, 8), "QUILLROW");
  auto u32 = [&](size_t off) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + off, 4);
    return v;
  };
  EXPECT_EQ(u32(8), 1u);
  EXPECT_EQ(u32(12), 5u);
  EXPECT_EQ(u32(16), 3u);
  EXPECT_EQ(u32(20), 0u);
  for (size_t i = 24; i < 64; ++i) EXPECT_EQ(bytes[i], 0) << i;
  EXPECT_EQ(u32(64), 7u);                        // row 0, token 0
  EXPECT_EQ(u32(64 + 4 * (2 * kT)), 4000000000u);  // row 2, token 0
  size_t mask_at = 64 + 4 * 3 * kT;
  EXPECT_EQ(bytes[mask_at + kT + 4], 1);  // row 1, mask 4
  // Nothing but the two files is left.
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.str())) ++files;
  EXPECT_EQ(files, 2);
}

TEST(Rows, SameInputsGiveByteIdenticalFiles) {
  TempDir a, b;
  write_sample(a.str());
  write_sample(b.str());
  EXPECT_EQ(read_file(a.sub("rows.bin")), read_file(b.sub("rows.bin")));
  EXPECT_EQ(read_file(a.sub("manifest.json")), read_file(b.sub("manifest.json")));
}

TEST(Rows, UnfinishedWriterLeavesNothingBehind) {
  TempDir tmp;
  write_sample(tmp.str());
  std::string before = read_file(tmp.sub("rows.bin"));
  {
    RowsWriter w(tmp.str(), kT);
    w.append(kTokens[1], kMask[1]);
  }  // destroyed without finish
  int files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(tmp.str())) ++files;
  EXPECT_EQ(files, 2);
  EXPECT_EQ(read_file(tmp.sub("rows.bin")), before);
  RowsReader::open(tmp.str(), true);
}

TEST(Rows, WriterRejectsBadRows) {
  TempDir tmp;
  RowsWriter w(tmp.str(), kT);
  std::vector<uint32_t> short_row = {1, 2, 3};
  std::vector<uint8_t> short_mask = {0, 0, 1};
  expect_error([&] { w.append(short_row, short_mask); }, {"row 0", "expected 5"});
  std::vector<uint8_t> bad_mask = {0, 2, 0, 0, 1};
  expect_error([&] { w.append(kTokens[0], bad_mask); }, {"mask[1] is 2"});
  expect_error([&] { w.finish({{"rows", 9}}); }, {"rows", "computed by the writer"});
  expect_error([] { RowsWriter bad("/tmp", 0); }, {"row_tokens"});
}

void truncate_file(const std::string& path, size_t bytes) { std::filesystem::resize_file(path, bytes); }

TEST(Rows, TruncatedFileNamesTheFile) {
  TempDir tmp;
  write_sample(tmp.str());
  truncate_file(tmp.sub("rows.bin"), 64 + 5 * 3 * kT - 1);
  expect_error([&] { RowsReader::open(tmp.str()); }, {tmp.sub("rows.bin"), "truncated"});
  truncate_file(tmp.sub("rows.bin"), 10);
  expect_error([&] { RowsReader::open(tmp.str()); }, {tmp.sub("rows.bin"), "64-byte header"});
}

void patch_file(const std::string& path, size_t offset, const void* data, size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(static_cast<std::streamoff>(offset));
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
}

TEST(Rows, HeaderDamageNamesTheFile) {
  TempDir tmp;
  write_sample(tmp.str());
  std::string path = tmp.sub("rows.bin");
  patch_file(path, 0, "QUILLRAW", 8);
  expect_error([&] { RowsReader::open(tmp.str()); }, {path, "magic"});
  patch_file(path, 0, "QUILLROW", 8);
  uint32_t v2 = 2;
  patch_file(path, 8, &v2, 4);
  expect_error([&] { RowsReader::open(tmp.str()); }, {path, "version is 2"});
  uint32_t v1 = 1;
  patch_file(path, 8, &v1, 4);
  uint64_t rows4 = 4;  // header claims more rows than the file holds
  patch_file(path, 16, &rows4, 8);
  expect_error([&] { RowsReader::open(tmp.str()); }, {path, "truncated"});
  uint64_t rows3 = 3;
  patch_file(path, 16, &rows3, 8);
  char one = 1;
  patch_file(path, 40, &one, 1);
  expect_error([&] { RowsReader::open(tmp.str()); }, {path, "reserved byte 40"});
}

TEST(Rows, ManifestMismatchNamesTheField) {
  TempDir tmp;
  nlohmann::json m = write_sample(tmp.str());
  m["rows"] = 4;
  write_file_atomic(tmp.sub("manifest.json"), m.dump(2));
  expect_error([&] { RowsReader::open(tmp.str()); }, {tmp.sub("manifest.json"), "field rows is 4", "has 3"});
  m["rows"] = 3;
  m["row_tokens"] = 6;
  write_file_atomic(tmp.sub("manifest.json"), m.dump(2));
  expect_error([&] { RowsReader::open(tmp.str()); }, {"field row_tokens is 6"});
  write_file_atomic(tmp.sub("manifest.json"), "{\"rows\": 3,");
  expect_error([&] { RowsReader::open(tmp.str()); }, {tmp.sub("manifest.json"), "malformed JSON"});
  std::filesystem::remove(tmp.sub("manifest.json"));
  expect_error([&] { RowsReader::open(tmp.str()); }, {tmp.sub("manifest.json"), "missing"});
}

TEST(Rows, VerifyCatchesChangedData) {
  TempDir tmp;
  write_sample(tmp.str());
  uint32_t other = 12345;
  patch_file(tmp.sub("rows.bin"), 64 + 4, &other, 4);
  RowsReader r = RowsReader::open(tmp.str());  // the header is fine
  expect_error([&] { r.verify(); }, {"rows_sha256"});
  expect_error([&] { RowsReader::open(tmp.str(), true); }, {"rows_sha256"});
}

TEST(Rows, ReaderIsMovable) {
  TempDir tmp;
  write_sample(tmp.str());
  RowsReader a = RowsReader::open(tmp.str());
  RowsReader b = std::move(a);
  EXPECT_EQ(b.tokens(1)[0], 9u);
  EXPECT_EQ(a.rows(), 0);
}

}  // namespace
}  // namespace quill
