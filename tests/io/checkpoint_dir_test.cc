#include "io/checkpoint_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "io/io_test_util.h"
#include "util/test_util.h"

namespace quill {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::same_bytes;
using test::ScratchDir;

std::vector<std::pair<std::string, Tensor>> some_tensors() {
  // 64, 64, 200, 16 and 64 bytes
  return {{"model.llm.a", test::random_tensor({4, 4}, DType::F32, 1)},
          {"model.llm.b", convert_dtype(test::random_tensor({32}, DType::F32, 2), DType::BF16)},
          {"model.llm.big", test::random_tensor({25}, DType::F64, 3)},
          {"model.llm.c", Tensor::zeros({2}, DType::I64)},
          {"model.mtp.d", test::random_tensor({16}, DType::F32, 5)}};
}

std::vector<SafetensorsItem> items_of(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<SafetensorsItem> items;
  for (const auto& [n, t] : tensors) items.push_back(SafetensorsItem::from_tensor(n, t));
  return items;
}

void expect_reads_back(const CheckpointDir& c, const std::vector<std::pair<std::string, Tensor>>& tensors) {
  ASSERT_EQ(c.names().size(), tensors.size());
  for (const auto& [n, t] : tensors) {
    ASSERT_TRUE(c.contains(n)) << n;
    Tensor back = c.tensor(n);
    EXPECT_EQ(back.dtype(), t.dtype()) << n;
    EXPECT_EQ(back.shape(), t.shape()) << n;
    EXPECT_TRUE(same_bytes(back, t)) << n;
  }
}

TEST(CheckpointDir, SingleFileWhenEverythingFits) {
  ScratchDir dir;
  auto tensors = some_tensors();
  auto files = write_checkpoint_dir(dir.path(), items_of(tensors));
  EXPECT_EQ(files, std::vector<std::string>{"model.safetensors"});
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  CheckpointDir c = CheckpointDir::open(dir.path());
  EXPECT_FALSE(c.sharded());
  EXPECT_EQ(SafetensorsFile::open(dir / "model.safetensors").metadata().at("format"), "pt");
  expect_reads_back(c, tensors);
  EXPECT_EQ(std::distance(fs::directory_iterator(dir.path()), {}), 1);  // no temporary left
}

TEST(CheckpointDir, ShardedWriteWithIndexReadsBack) {
  ScratchDir dir;
  auto tensors = some_tensors();
  CheckpointWriteOptions opt;
  opt.max_shard_bytes = 130;  // a+b (128) | big (200, alone: over the limit) | c+d (80)
  auto files = write_checkpoint_dir(dir.path(), items_of(tensors), opt);
  EXPECT_EQ(files, (std::vector<std::string>{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                                             "model-00003-of-00003.safetensors", "model.safetensors.index.json"}));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));

  auto index = nlohmann::json::parse(read_file(dir / "model.safetensors.index.json"));
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), 64u + 64 + 200 + 16 + 64);
  EXPECT_EQ(index["weight_map"]["model.llm.a"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.llm.b"], "model-00001-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.llm.big"], "model-00002-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.llm.c"], "model-00003-of-00003.safetensors");
  EXPECT_EQ(index["weight_map"]["model.mtp.d"], "model-00003-of-00003.safetensors");

  CheckpointDir c = CheckpointDir::open(dir.path());
  EXPECT_TRUE(c.sharded());
  EXPECT_EQ(c.index_total_size(), std::optional<uint64_t>(408));
  EXPECT_EQ(c.shard_of("model.llm.big"), "model-00002-of-00003.safetensors");
  expect_reads_back(c, tensors);
  EXPECT_EQ(c.names(), (std::vector<std::string>{"model.llm.a", "model.llm.b", "model.llm.big", "model.llm.c",
                                                 "model.mtp.d"}));
}

TEST(CheckpointDir, RewritingWithTheOtherLayoutRemovesTheStaleEntryFile) {
  ScratchDir dir;
  auto tensors = some_tensors();
  CheckpointWriteOptions small;
  small.max_shard_bytes = 100;
  write_checkpoint_dir(dir.path(), items_of(tensors), small);
  write_checkpoint_dir(dir.path(), items_of(tensors));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors.index.json"));
  expect_reads_back(CheckpointDir::open(dir.path()), tensors);
  write_checkpoint_dir(dir.path(), items_of(tensors), small);
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));
  expect_reads_back(CheckpointDir::open(dir.path()), tensors);
}

TEST(CheckpointDir, Errors) {
  ScratchDir dir;
  expect_error([&] { CheckpointDir::open(dir.path()); }, {dir.path(), "not a Hugging Face checkpoint"});
  expect_error([&] { CheckpointDir::open(dir / "absent"); }, {"absent", "not a directory"});

  write_checkpoint_dir(dir.path(), items_of(some_tensors()));
  CheckpointDir c = CheckpointDir::open(dir.path());
  expect_error([&] { c.tensor("model.llm.zzz"); }, {dir.path(), "tensor model.llm.zzz missing"});

  ScratchDir sharded;
  fs::create_directories(sharded / "x");
  test::write_bytes(sharded / "x/model.safetensors.index.json", "{\"weight_map\": {\"w\": ");
  expect_error([&] { CheckpointDir::open(sharded / "x"); }, {"model.safetensors.index.json", "not valid JSON"});
  test::write_bytes(sharded / "x/model.safetensors.index.json", R"({"weight_map": {"w": "gone.safetensors"}})");
  expect_error([&] { CheckpointDir::open(sharded / "x"); }, {"gone.safetensors", "does not exist"});
  test::write_bytes(sharded / "x/model.safetensors.index.json", R"({"weight_map": {"w": "../up.safetensors"}})");
  expect_error([&] { CheckpointDir::open(sharded / "x"); }, {"../up.safetensors", "w"});
  // listed in the index but absent from the shard
  write_safetensors(sharded / "x/s.safetensors", {{"other", Tensor::zeros({1}, DType::F32)}});
  test::write_bytes(sharded / "x/model.safetensors.index.json",
                    R"({"metadata": {"total_size": 4}, "weight_map": {"w": "s.safetensors", "other": "s.safetensors"}})");
  CheckpointDir s = CheckpointDir::open(sharded / "x");
  EXPECT_EQ(s.tensor("other").numel(), 1);
  expect_error([&] { s.tensor("w"); }, {"tensor w", "s.safetensors"});
}

TEST(CheckpointDir, ShardsOpenLazily) {
  ScratchDir dir;
  auto tensors = some_tensors();
  CheckpointWriteOptions opt;
  opt.max_shard_bytes = 130;
  write_checkpoint_dir(dir.path(), items_of(tensors), opt);
  // Corrupt shard 3: opening the directory and reading shard 1 still work; shard 3 fails when used.
  test::write_bytes(dir / "model-00003-of-00003.safetensors", "junk");
  CheckpointDir c = CheckpointDir::open(dir.path());
  EXPECT_TRUE(same_bytes(c.tensor("model.llm.a"), tensors[0].second));
  expect_error([&] { c.tensor("model.llm.c"); }, {"model-00003-of-00003.safetensors", "truncated"});
}

}  // namespace
}  // namespace quill
