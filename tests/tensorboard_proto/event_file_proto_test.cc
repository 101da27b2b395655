// quill train --tensorboard-dir (issue 45), read back with the public event protos (event.proto here,
// compiled by Debian's protoc, parsed by libprotobuf): the TFRecord frames of a tiny run's event file each
// hold an Event that libprotobuf parses; the first carries file_version "brain.Event:2", then one Event per
// step with the step's scalars as Summary values whose simple_value equals metrics.jsonl. (The CRCs and the
// wire format are checked by tests/cli/tensorboard_cli_test.cc with a decoder of its own.)
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "event.pb.h"
#include "util/command.h"
#include "util/run_dir.h"

namespace {

// The events of a TFRecord file: per record, the length (8 bytes, little-endian), its masked CRC (4), the
// data, the data's masked CRC (4).
std::vector<tensorboard::Event> parse_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<tensorboard::Event> events;
  for (size_t at = 0; at < bytes.size();) {
    EXPECT_LE(at + 12, bytes.size()) << "a torn record header at byte " << at;
    if (at + 12 > bytes.size()) break;
    uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = (length << 8) | static_cast<unsigned char>(bytes[at + i]);
    EXPECT_LE(at + 12 + length + 4, bytes.size()) << "a torn record at byte " << at;
    if (at + 12 + length + 4 > bytes.size()) break;
    tensorboard::Event e;
    EXPECT_TRUE(e.ParseFromString(bytes.substr(at + 12, length))) << "record at byte " << at;
    events.push_back(e);
    at += 12 + length + 4;
  }
  return events;
}

TEST(TensorBoardProtos, EventFileParsesWithThePublicProtos) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR;
  const std::string rows = quill::test::fresh_temp_dir("tensorboard-proto", "rows");
  quill::test::run_checked(quill + " data synth --conversations 300 --row-tokens 32 --max-rows 64 --out " + rows);
  const std::string out = quill::test::fresh_temp_dir("tensorboard-proto", "out");
  const std::string tb = quill::test::fresh_temp_dir("tensorboard-proto", "tb");
  ASSERT_EQ(quill::test::run_checked(quill + " train --config " + src + "/configs/tiny.json --rows " + rows +
                                     " --seed 4 --steps 3 --global-batch 4 --lr 1e-2 --quiet --tensorboard-dir " + tb +
                                     " --out " + out),
            0);
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(tb)) files.push_back(entry.path().string());
  ASSERT_EQ(files.size(), 1u);

  const std::vector<tensorboard::Event> events = parse_events(files[0]);
  const std::vector<nlohmann::json> metrics = quill::test::read_metrics(out);
  ASSERT_EQ(metrics.size(), 3u);
  ASSERT_EQ(events.size(), 4u) << "the file_version event, then one per step";
  EXPECT_EQ(events[0].file_version(), "brain.Event:2");
  for (size_t i = 0; i < 3; ++i) {
    const tensorboard::Event& e = events[i + 1];
    EXPECT_EQ(e.step(), static_cast<int64_t>(i));
    ASSERT_TRUE(e.has_summary());
    std::map<std::string, float> scalars;
    for (const tensorboard::Summary::Value& v : e.summary().value()) {
      EXPECT_TRUE(v.has_simple_value()) << v.tag();
      scalars[v.tag()] = v.simple_value();
    }
    EXPECT_EQ(scalars.at("lm loss"), static_cast<float>(metrics[i]["loss"].get<double>()));
    EXPECT_EQ(scalars.at("learning rate"), static_cast<float>(metrics[i]["lr"].get<double>()));
    EXPECT_EQ(scalars.at("grad norm"), static_cast<float>(metrics[i]["grad_norm"].get<double>()));
    for (int layer : {1, 2, 3}) EXPECT_EQ(scalars.count("expert load/max over mean/layer " + std::to_string(layer)), 1u);
  }
}

}  // namespace
