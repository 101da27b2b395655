// quill train --tensorboard-dir (issue 45): the event file a tiny run writes, read back by a decoder of
// its own (TFRecord framing with both CRCs checked, then the Event and Summary protobufs), holds the
// file_version event first and one event per step whose "lm loss" is metrics.jsonl's loss, with the
// expert-load scalars of every MoE layer; a directory that cannot be created is refused before --out.
#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "io/crc32c.h"
#include "util/command.h"
#include "util/run_dir.h"

namespace {

const std::string kQuill = QUILL_BINARY, kSrc = QUILL_SOURCE_DIR;

struct DecodedEvent {
  double wall_time = 0;
  int64_t step = -1;
  std::string file_version;
  std::map<std::string, float> scalars;
};

// A protobuf reader over one message's bytes: just the wire types an Event uses.
struct Reader {
  std::string_view bytes;
  size_t at = 0;
  bool done() const { return at >= bytes.size(); }
  uint64_t varint() {
    uint64_t v = 0;
    for (int shift = 0; at < bytes.size(); shift += 7) {
      const uint8_t b = static_cast<uint8_t>(bytes[at++]);
      v |= static_cast<uint64_t>(b & 0x7F) << shift;
      if (!(b & 0x80)) return v;
    }
    ADD_FAILURE() << "a varint runs past the message";
    return v;
  }
  uint64_t fixed(int n) {
    uint64_t v = 0;
    for (int i = 0; i < n && at < bytes.size(); ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(bytes[at++])) << (8 * i);
    return v;
  }
  std::string_view delimited() {
    const size_t n = varint();
    EXPECT_LE(at + n, bytes.size());
    const std::string_view v = bytes.substr(at, n);
    at += n;
    return v;
  }
};

uint32_t masked(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

std::vector<DecodedEvent> read_events(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  const std::string file((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<DecodedEvent> events;
  for (size_t at = 0; at < file.size();) {
    Reader header{std::string_view(file).substr(at, 12)};
    if (header.bytes.size() < 12) {
      ADD_FAILURE() << path << ": a torn record header at byte " << at;
      break;
    }
    const uint64_t length = header.fixed(8);
    EXPECT_EQ(header.fixed(4), masked(quill::crc32c(file.substr(at, 8)))) << "length CRC at byte " << at;
    if (at + 12 + length + 4 > file.size()) {
      ADD_FAILURE() << path << ": a torn record at byte " << at;
      break;
    }
    const std::string data = file.substr(at + 12, length);
    Reader tail{std::string_view(file).substr(at + 12 + length, 4)};
    EXPECT_EQ(tail.fixed(4), masked(quill::crc32c(data))) << "data CRC at byte " << at;
    at += 12 + length + 4;

    DecodedEvent e;
    for (Reader r{data}; !r.done();) {
      const uint64_t key = r.varint();
      switch (key) {
        case (1 << 3) | 1: e.wall_time = std::bit_cast<double>(r.fixed(8)); break;
        case (2 << 3) | 0: e.step = static_cast<int64_t>(r.varint()); break;
        case (3 << 3) | 2: e.file_version = std::string(r.delimited()); break;
        case (5 << 3) | 2:
          for (Reader summary{r.delimited()}; !summary.done();) {
            EXPECT_EQ(summary.varint(), (1u << 3) | 2) << "Summary.value";
            std::string tag;
            float value = NAN;
            for (Reader v{summary.delimited()}; !v.done();) {
              const uint64_t k = v.varint();
              if (k == ((1 << 3) | 2)) tag = v.delimited();
              else if (k == ((2 << 3) | 5)) value = std::bit_cast<float>(static_cast<uint32_t>(v.fixed(4)));
              else ADD_FAILURE() << "unexpected Summary.Value key " << k;
            }
            e.scalars[tag] = value;
          }
          break;
        default: ADD_FAILURE() << "unexpected Event key " << key; return events;
      }
    }
    events.push_back(e);
  }
  return events;
}

std::string synth_rows(const std::string& name) {
  const std::string rows = quill::test::fresh_temp_dir("tensorboard", name);
  quill::test::run_checked(kQuill + " data synth --conversations 300 --row-tokens 32 --max-rows 64 --out " + rows);
  return rows;
}

std::string train_command(const std::string& rows) {
  return kQuill + " train --config " + kSrc + "/configs/tiny.json --rows " + rows +
         " --seed 4 --steps 3 --global-batch 4 --lr 1e-2 --quiet";
}

TEST(TensorBoardCli, EventFileHoldsEachStepsScalarsAsMetricsJsonl) {
  const std::string rows = synth_rows("rows");
  const std::string out = quill::test::fresh_temp_dir("tensorboard", "out");
  const std::string tb = quill::test::fresh_temp_dir("tensorboard", "tb") + "/nested";
  ASSERT_EQ(quill::test::run_checked(train_command(rows) + " --tensorboard-dir " + tb + " --out " + out), 0);

  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(tb)) files.push_back(entry.path().string());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_NE(files[0].find("/events.out.tfevents."), std::string::npos) << files[0];

  const std::vector<DecodedEvent> events = read_events(files[0]);
  const std::vector<nlohmann::json> metrics = quill::test::read_metrics(out);
  ASSERT_EQ(metrics.size(), 3u);
  ASSERT_EQ(events.size(), 4u) << "the file_version event, then one per step";
  EXPECT_EQ(events[0].file_version, "brain.Event:2");
  EXPECT_TRUE(events[0].scalars.empty());
  for (size_t i = 0; i < 3; ++i) {
    const DecodedEvent& e = events[i + 1];
    EXPECT_EQ(e.step, static_cast<int64_t>(i));
    EXPECT_GT(e.wall_time, 1.7e9) << "seconds since 1970";
    ASSERT_EQ(e.scalars.count("lm loss"), 1u);
    EXPECT_EQ(e.scalars.at("lm loss"), static_cast<float>(metrics[i]["loss"].get<double>()));
    EXPECT_EQ(e.scalars.at("learning rate"), static_cast<float>(metrics[i]["lr"].get<double>()));
    EXPECT_EQ(e.scalars.at("grad norm"), static_cast<float>(metrics[i]["grad_norm"].get<double>()));
    EXPECT_EQ(e.scalars.at("step time (s)"), static_cast<float>(metrics[i]["step_time_s"].get<double>()));
    for (const char* tag : {"tokens/s", "mfu"}) EXPECT_GT(e.scalars.count(tag) ? e.scalars.at(tag) : 0.0f, 0.0f) << tag;
    for (int layer : {1, 2, 3}) {  // the tiny model's sparse layers
      const std::string max_over_mean = "expert load/max over mean/layer " + std::to_string(layer);
      const std::string idle = "expert load/idle experts/layer " + std::to_string(layer);
      ASSERT_EQ(e.scalars.count(max_over_mean), 1u) << max_over_mean;
      ASSERT_EQ(e.scalars.count(idle), 1u) << idle;
      EXPECT_GE(e.scalars.at(max_over_mean), 1.0f);
      int64_t zero = 0;
      for (int64_t n : metrics[i]["expert_tokens"][layer - 1].get<std::vector<int64_t>>()) zero += n == 0;
      EXPECT_EQ(e.scalars.at(idle), static_cast<float>(zero)) << idle;
    }
    EXPECT_EQ(e.scalars.count("expert load/max over mean/layer 0"), 0u) << "layer 0 is dense";
  }
}

TEST(TensorBoardCli, UnwritableDirIsRefusedBeforeAnythingIsWritten) {
  const std::string rows = synth_rows("rows-refused");
  const std::string base = quill::test::fresh_temp_dir("tensorboard", "file");
  std::filesystem::create_directories(base);
  std::ofstream(base + "/plain") << "not a directory";
  const std::string out = quill::test::fresh_temp_dir("tensorboard", "out-refused");
  const quill::test::CommandResult r =
      quill::test::run_command(train_command(rows) + " --tensorboard-dir " + base + "/plain/tb --out " + out);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--tensorboard-dir"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(out)) << "a refused run writes nothing to --out";
}

// quill run: a recipe's relative --tensorboard-dir lands under the run's --out.
TEST(TensorBoardCli, QuillRunPutsARecipesRelativeDirUnderOut) {
  const std::string rows = quill::test::fresh_temp_dir("tensorboard", "rows-run");
  quill::test::run_checked("cd " + kSrc + " && " + kQuill +
                           " data synth --input data/synthetic/conversations.jsonl --row-tokens 128 --out " + rows);
  std::ifstream in(kSrc + "/recipes/tiny-cpu.yaml");
  std::string recipe((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string last = "--moe-token-dispatcher-type alltoall";
  ASSERT_NE(recipe.find(last), std::string::npos);
  recipe.insert(recipe.find(last) + last.size(), " --tensorboard-dir tb");
  const std::string path = quill::test::fresh_temp_dir("tensorboard", "recipe") + ".yaml";
  std::ofstream(path) << recipe;
  const std::string out = quill::test::fresh_temp_dir("tensorboard", "run-out");
  std::string said;
  ASSERT_EQ(quill::test::run_checked("cd " + kSrc + " && " + kQuill + " run " + path + " --device cpu --set SFT_DATA=" +
                                         rows + " --steps 2 --out " + out, &said), 0);
  ASSERT_TRUE(std::filesystem::is_directory(out + "/tb")) << said;
  std::vector<DecodedEvent> events;
  for (const auto& entry : std::filesystem::directory_iterator(out + "/tb")) events = read_events(entry.path().string());
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[2].step, 1);
  EXPECT_EQ(events[2].scalars.count("lm loss"), 1u);
}

}  // namespace
