// `quill data build --valid-fraction F`: the held-out conversations are the last floor(F x N) of the
// seeded permutation, packed into OUT/valid with a manifest of their own; the training rows hold none
// of them (checked through a marker in every conversation), the split is the same on every build and
// whatever the thread count, and a fraction outside [0, 1) or one that holds out nothing is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>
#include <string>

#include "base/file_util.h"
#include "data/build_rows.h"
#include "data/byte_tokenizer.h"
#include "data/packing.h"
#include "data/rows.h"
#include "data/rows_pipeline.h"
#include "data_test_util.h"

namespace quill {
namespace {

using test::expect_error;
using test::TempDir;

// Conversation k asks about "<k=K>" and is answered with it, so that a split's rows name their conversations.
std::vector<Conversation> marked_conversations(int n) {
  std::vector<Conversation> out;
  for (int k = 0; k < n; ++k) {
    Conversation c;
    c.messages.push_back({Role::kUser, "repeat <k=" + std::to_string(k) + ">"});
    c.messages.push_back({Role::kModel, "<k=" + std::to_string(k) + ">"});
    out.push_back(std::move(c));
  }
  return out;
}

// The markers found in a rows directory's rows, read as one stream (a marker cut by a row end is rejoined).
std::set<int> markers(const std::string& dir) {
  const RowsReader rows = RowsReader::open(dir, /*verify_sha256=*/true);
  std::vector<uint32_t> all;
  for (int64_t r = 0; r < rows.rows(); ++r) all.insert(all.end(), rows.tokens(r), rows.tokens(r) + rows.row_tokens());
  const std::string text = ByteTokenizer().decode(all);
  std::set<int> found;
  for (size_t at = text.find("<k="); at != std::string::npos; at = text.find("<k=", at + 1)) {
    const size_t end = text.find('>', at);
    if (end != std::string::npos) found.insert(std::stoi(text.substr(at + 3, end - at - 3)));
  }
  return found;
}

TEST(ValidSplit, HeldOutConversationsAreTheLastOfThePermutationAndDisjointFromTraining) {
  TempDir tmp;
  const int n = 400;
  BuildOptions o = test::build_options(2, 64);
  o.seed = 11;
  o.valid_fraction = 0.1;
  const nlohmann::json m = build_rows(marked_conversations(n), ByteTokenizer(), o, tmp.sub("out"));
  const std::vector<int64_t> perm = fisher_yates_permutation(n, o.seed);
  std::set<int> held(perm.end() - 40, perm.end());

  const std::set<int> valid = markers(tmp.sub("out/valid")), train = markers(tmp.sub("out"));
  EXPECT_FALSE(valid.empty());
  EXPECT_FALSE(train.empty());
  for (int k : valid) EXPECT_TRUE(held.count(k)) << "conversation " << k << " is in the validation rows, not held out";
  for (int k : train) EXPECT_FALSE(held.count(k)) << "held-out conversation " << k << " is in the training rows";
  // Every held-out conversation but the last partial row's tail is in the validation rows.
  EXPECT_GE(valid.size(), 35u);

  EXPECT_EQ(m["split"]["role"], "training");
  EXPECT_EQ(m["split"]["held_out_conversations"], 40);
  EXPECT_EQ(m["split"]["of_conversations"], n);
  EXPECT_EQ(m["split"]["valid_dir"], "valid");
  EXPECT_EQ(m["conversations"]["input"], n - 40);
  const RowsReader v = RowsReader::open(tmp.sub("out/valid"));
  EXPECT_EQ(v.manifest()["split"]["role"], "validation");
  EXPECT_EQ(v.manifest()["conversations"]["input"], 40);
  EXPECT_EQ(v.manifest()["rows_sha256"], m["split"]["valid_rows_sha256"]);
  EXPECT_EQ(v.rows(), m["split"]["valid_rows"].get<int64_t>());
  EXPECT_EQ(v.row_tokens(), 64);
}

TEST(ValidSplit, SameSplitOnEveryBuildAndThreadCount) {
  TempDir tmp;
  std::string train_bytes, valid_bytes;
  for (int threads : {1, 3}) {
    BuildOptions o = test::build_options(threads, 64);
    o.valid_fraction = 0.25;
    const std::string out = tmp.sub("out" + std::to_string(threads));
    build_rows(marked_conversations(300), ByteTokenizer(), o, out);
    if (train_bytes.empty()) {
      train_bytes = read_file(out + "/rows.bin"), valid_bytes = read_file(out + "/valid/rows.bin");
      continue;
    }
    EXPECT_EQ(read_file(out + "/rows.bin"), train_bytes);
    EXPECT_EQ(read_file(out + "/valid/rows.bin"), valid_bytes);
  }
}

TEST(ValidSplit, FractionsHoldOutTheirShare) {
  EXPECT_EQ(held_out_conversations(1000, 0), 0);
  EXPECT_EQ(held_out_conversations(1000, 0.05), 50);
  EXPECT_EQ(held_out_conversations(999, 0.1), 99);
  EXPECT_EQ(held_out_conversations(3, 0.5), 1);
  expect_error([] { check_valid_fraction(1.0); }, {"--valid-fraction 1: must be in [0, 1)"});
  expect_error([] { check_valid_fraction(-0.1); }, {"--valid-fraction -0.1: must be in [0, 1)"});
  TempDir tmp;
  BuildOptions o = test::build_options(1, 64);
  o.valid_fraction = 0.01;
  expect_error([&] { build_rows(marked_conversations(50), ByteTokenizer(), o, tmp.sub("none")); },
               {"--valid-fraction 0.01: of 50 conversations that holds out none"});
  EXPECT_FALSE(std::filesystem::exists(tmp.sub("none/rows.bin")));
}

// --max-rows limits the training rows only; the split is the same with or without it.
TEST(ValidSplit, MaxRowsLimitsOnlyTheTrainingRows) {
  TempDir tmp;
  BuildOptions o = test::build_options(2, 64);
  o.valid_fraction = 0.2;
  build_rows(marked_conversations(300), ByteTokenizer(), o, tmp.sub("all"));
  o.max_rows = 3;
  build_rows(marked_conversations(300), ByteTokenizer(), o, tmp.sub("few"));
  EXPECT_EQ(RowsReader::open(tmp.sub("few")).rows(), 3);
  EXPECT_EQ(read_file(tmp.sub("few/valid/rows.bin")), read_file(tmp.sub("all/valid/rows.bin")));
}

// A build without a split into a directory that held one removes the old held-out rows.
TEST(ValidSplit, ABuildWithoutASplitRemovesAnOldOne) {
  TempDir tmp;
  BuildOptions o = test::build_options(1, 64);
  o.valid_fraction = 0.2;
  build_rows(marked_conversations(100), ByteTokenizer(), o, tmp.sub("out"));
  ASSERT_TRUE(std::filesystem::exists(tmp.sub("out/valid/rows.bin")));
  o.valid_fraction = 0;
  const nlohmann::json m = build_rows(marked_conversations(100), ByteTokenizer(), o, tmp.sub("out"));
  EXPECT_FALSE(m.contains("split"));
  EXPECT_FALSE(std::filesystem::exists(tmp.sub("out/valid")));
}

}  // namespace
}  // namespace quill
