// TensorBoard's event files (train/tensorboard_events.h, train/tensorboard.h): CRC-32C against published
// check values, a record framed and parsed back with both CRCs checked, the protobuf bytes of an Event
// against hand-encoded ones, a step's scalars, and a --tensorboard-dir that cannot be created.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "io/crc32c.h"
#include "train/tensorboard.h"
#include "util/test_util.h"

namespace quill {
namespace {

// The little-endian unsigned integer of `n` bytes at `at`.
uint64_t read_le(const std::string& s, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(s.at(at + i))) << (8 * i);
  return v;
}
uint64_t read_u64(const std::string& s, size_t at) { return read_le(s, at, 8); }
uint32_t read_u32(const std::string& s, size_t at) { return static_cast<uint32_t>(read_le(s, at, 4)); }

TEST(Crc32c, MatchesPublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789"), 0xE3069283u);               // the CRC catalogue's check value
  EXPECT_EQ(crc32c(std::string(32, '\0')), 0x8A9136AAu);     // RFC 3720, B.4: 32 bytes of zeros
  EXPECT_EQ(crc32c(std::string(32, '\xff')), 0x62A8AB43u);   // and of ones
  EXPECT_EQ(crc32c(""), 0u);
  EXPECT_EQ(crc32c("6789", crc32c("12345")), 0xE3069283u) << "a CRC continues over the bytes that follow";
}

TEST(TensorBoardEvents, RecordFramingParsesBackWithBothCrcs) {
  const std::string data("an event's bytes, \0 included", 28);
  const std::string record = tf_record(data);
  ASSERT_EQ(record.size(), 8 + 4 + data.size() + 4);
  EXPECT_EQ(read_u64(record, 0), data.size());
  const auto masked = [](uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; };
  EXPECT_EQ(read_u32(record, 8), masked(crc32c(record.substr(0, 8))));
  EXPECT_EQ(record.substr(12, data.size()), data);
  EXPECT_EQ(read_u32(record, 12 + data.size()), masked(crc32c(data)));
  EXPECT_EQ(masked_crc32c("123456789"), masked(0xE3069283u));
}

TEST(TensorBoardEvents, EventBytesAreTheProtobufEncoding) {
  // wall_time 0 (field 1, fixed64), step 0 (field 2, varint), file_version (field 3, bytes).
  const std::string version = std::string("\x09", 1) + std::string(8, '\0') + std::string("\x10\x00\x1a\x0d", 4) +
                              "brain.Event:2";
  EXPECT_EQ(file_version_event(0.0), version);
  // wall_time 1.5 = 0x3FF8000000000000, step 300 = varint AC 02, summary (field 5) of one value
  // (field 1) with tag "a" (field 1) and simple_value 1.0f = 0x3F800000 (field 2, fixed32).
  const std::string scalars = std::string("\x09\0\0\0\0\0\0\xf8\x3f", 9) + std::string("\x10\xac\x02", 3) +
                              std::string("\x2a\x0a\x0a\x08\x0a\x01" "a" "\x15\x00\x00\x80\x3f", 12);
  EXPECT_EQ(scalars_event(1.5, 300, {{"a", 1.0f}}), scalars);
}

TEST(TensorBoardEvents, StepScalarsNameTheMegatronTagsAndExpertLoad) {
  StepMetrics m;
  m.step = 2, m.loss = 3.25, m.lr = 0.01, m.grad_norm = 0.5, m.tokens = 1000, m.step_time_s = 0.5;
  m.expert_tokens = {{4, 0, 0, 0}, {1, 1, 1, 1}};
  const TensorBoardRun run{{1, 3}, 1000000, 2, false};
  const std::vector<TensorBoardScalar> s = step_scalars(m, run);
  std::map<std::string, float> by_tag;
  for (const TensorBoardScalar& v : s) by_tag[v.tag] = v.value;
  EXPECT_EQ(s.front().tag, "lm loss");
  EXPECT_FLOAT_EQ(by_tag.at("lm loss"), 3.25f);
  EXPECT_FLOAT_EQ(by_tag.at("learning rate"), 0.01f);
  EXPECT_FLOAT_EQ(by_tag.at("grad norm"), 0.5f);
  EXPECT_FLOAT_EQ(by_tag.at("tokens/s"), 2000.0f);
  EXPECT_FLOAT_EQ(by_tag.at("step time (s)"), 0.5f);
  EXPECT_FLOAT_EQ(by_tag.at("mfu"), static_cast<float>(6.0 * 1e6 * 1000.0 / 989e12));  // per GPU of 2
  EXPECT_EQ(by_tag.count("peak memory (GiB)"), 0u) << "no probe, no memory";
  EXPECT_EQ(by_tag.count("lm loss validation"), 0u) << "not an evaluation step";
  EXPECT_FLOAT_EQ(by_tag.at("expert load/max over mean/layer 1"), 4.0f);
  EXPECT_FLOAT_EQ(by_tag.at("expert load/idle experts/layer 1"), 3.0f);
  EXPECT_FLOAT_EQ(by_tag.at("expert load/max over mean/layer 3"), 1.0f);
  EXPECT_FLOAT_EQ(by_tag.at("expert load/idle experts/layer 3"), 0.0f);

  m.memory.peak_bytes = int64_t{3} << 29;
  const std::vector<TensorBoardScalar> simulated = step_scalars(m, TensorBoardRun{{1, 3}, 1000000, 2, true});
  by_tag.clear();
  for (const TensorBoardScalar& v : simulated) by_tag[v.tag] = v.value;
  EXPECT_FLOAT_EQ(by_tag.at("peak memory (GiB)"), 1.5f);
  EXPECT_EQ(by_tag.count("mfu"), 0u) << "a simulated rank's time is not the job's";

  // An evaluation step: Megatron's tag for the validation loss.
  m.valid_loss = 2.75;
  by_tag.clear();
  for (const TensorBoardScalar& v : step_scalars(m, run)) by_tag[v.tag] = v.value;
  EXPECT_FLOAT_EQ(by_tag.at("lm loss validation"), 2.75f);
}

TEST(TensorBoardEvents, DirectoryUnderARegularFileIsRefusedNamingTheFlag) {
  const std::filesystem::path base = std::filesystem::temp_directory_path() / ("quill-tb-" + std::to_string(::getpid()));
  std::filesystem::create_directories(base);
  std::ofstream(base / "file") << "x";
  test::expect_error([&] { check_tensorboard_dir((base / "file" / "tb").string()); }, "--tensorboard-dir");
  test::expect_error([&] { check_tensorboard_dir((base / "file").string()); }, "not a directory");
  check_tensorboard_dir((base / "new" / "tb").string());  // creatable: accepted, and nothing made
  EXPECT_FALSE(std::filesystem::exists(base / "new"));
  TensorBoardLog log((base / "new" / "tb").string(), TensorBoardRun{});
  EXPECT_TRUE(std::filesystem::exists(log.path()));
  EXPECT_NE(log.path().find("/events.out.tfevents."), std::string::npos);
  std::filesystem::remove_all(base);
}

}  // namespace
}  // namespace quill
