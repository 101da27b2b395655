// The quill executable as a user meets it: exit status and the one-line error for bad input, and
// that a failed command leaves no partial output behind.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include "util/command.h"

namespace {

namespace fs = std::filesystem;

using quill::test::CommandResult;

CommandResult quill(const std::string& args) { return quill::test::run_command(std::string(QUILL_BINARY) + " " + args); }

std::string temp(const std::string& name) {
  std::string d = (fs::temp_directory_path() / ("quill-cli-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  return d;
}

const std::string kSrc = QUILL_SOURCE_DIR;
const std::string kConfigs = kSrc + "/tests/fixtures/configs";

TEST(Cli, ModelInfoGivesInklingSmallCounts) {
  CommandResult r = quill("model info --config " + kConfigs + "/inkling-small-release.json");
  ASSERT_EQ(r.status, 0) << r.output;
  auto j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["total_params"].get<int64_t>(), 263655199274);
  EXPECT_EQ(j["active_params"].get<int64_t>(), 11173191680);
}

TEST(Cli, MalformedConfigIsOneClearError) {
  CommandResult r = quill("model info --config " + kConfigs + "/bad/malformed.json");
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("quill: error:"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("malformed.json"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
}

TEST(Cli, MissingRowsNamesThePathAndWritesNothing) {
  const std::string out = temp("missing-rows");
  CommandResult r = quill("train --config " + kSrc + "/configs/tiny.json --rows /nonexistent/rows --steps 1 --global-batch 1 --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("/nonexistent/rows"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out));
}

TEST(Cli, CheckpointMissingATensorNamesItAndLeavesNoCheckpoint) {
  const std::string rows = temp("rows"), init = temp("init"), out = temp("out");
  ASSERT_EQ(quill("data synth --conversations 50 --row-tokens 64 --out " + rows).status, 0);
  ASSERT_EQ(quill("train --config " + kSrc + "/configs/tiny.json --rows " + rows +
                  " --steps 1 --global-batch 1 --save-hf --quiet --out " + init).status, 0);
  const std::string hf = init + "/hf";
  ASSERT_TRUE(fs::exists(hf + "/model.safetensors"));
  // A config that asks for one more layer than the checkpoint holds: layer 4's tensors are missing.
  auto config = nlohmann::json::parse(std::ifstream(hf + "/config.json"));
  config["num_hidden_layers"] = 5;
  config["layer_types"].push_back("hybrid_sliding");
  config["mlp_layer_types"].push_back("sparse");
  std::ofstream(hf + "/config.json") << config.dump();
  CommandResult r = quill("train --init " + hf + " --rows " + rows + " --steps 1 --global-batch 1 --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("model.llm.layers.4."), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("missing"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out + "/checkpoint"));
}

TEST(Cli, UnknownFreezePresetIsRejected) {
  CommandResult r = quill("train --config " + kSrc + "/configs/tiny.json --rows x --steps 1 --global-batch 1 --freeze-preset bogus --out " +
                temp("preset"));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find("bogus"), std::string::npos) << r.output;
}

TEST(Cli, TiedEmbeddingsConfigIsRefusedByName) {
  auto config = nlohmann::json::parse(std::ifstream(kSrc + "/configs/tiny.json"));
  config["tie_word_embeddings"] = true;
  const std::string path = temp("tied.json");
  std::ofstream(path) << config.dump();
  CommandResult r = quill("model info --config " + path);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find(path + ": tie_word_embeddings: true is not supported"), std::string::npos) << r.output;
  fs::remove(path);
}

TEST(Cli, TransformersWrittenConfigWithDefaultsOmittedGivesTheSameCounts) {
  CommandResult full = quill("model info --config " + kSrc + "/tests/fixtures/hf/written/slice.json");
  CommandResult omitted = quill("model info --config " + kSrc + "/tests/fixtures/hf/omitted/slice.json");
  ASSERT_EQ(full.status, 0) << full.output;
  ASSERT_EQ(omitted.status, 0) << omitted.output;
  auto a = nlohmann::json::parse(full.output), b = nlohmann::json::parse(omitted.output);
  EXPECT_EQ(a["total_params"], b["total_params"]);
  EXPECT_EQ(a["active_params"], b["active_params"]);
  // transformers' own count of the model it builds from the written config (tests/fixtures/hf/README.md).
  const int64_t hf = nlohmann::json::parse(std::ifstream(kSrc + "/tests/fixtures/hf/written/slice.params.json"))["parameters"];
  EXPECT_EQ(a["transformers_params"].get<int64_t>(), hf);
  EXPECT_EQ(b["transformers_params"].get<int64_t>(), hf);
}

TEST(Cli, HugeDimensionFailsNamingFileAndFieldBeforeAllocating) {
  const std::string rows = temp("huge-rows"), out = temp("huge-out"), path = temp("huge.json");
  ASSERT_EQ(quill("data synth --conversations 20 --row-tokens 64 --out " + rows).status, 0);
  auto config = nlohmann::json::parse(std::ifstream(kSrc + "/configs/tiny.json"));
  config["hidden_size"] = int64_t{1} << 40;
  std::ofstream(path) << config.dump();
  CommandResult r = quill("train --config " + path + " --rows " + rows + " --steps 1 --global-batch 1 --out " + out);
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.output.find(path + ": hidden_size: the model's"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("out of host memory"), std::string::npos) << r.output;
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
  fs::remove(path);
}

}  // namespace

namespace {
// The README's main command runs again and again: the demo's directory is its own.
TEST(Cli, DemoRunsAgainIntoItsOwnDirectory) {
  const std::string out = temp("demo");
  for (int i = 0; i < 2; ++i) {
    CommandResult r = quill("demo --steps 2 --source-dir " + kSrc + " --out " + out);
    ASSERT_EQ(r.status, 0) << "run " << i << ": " << r.output;
    EXPECT_NE(r.output.find("quill demo: loss"), std::string::npos) << r.output;
  }
}
}  // namespace

namespace {
// The layout flags are checked before anything loads, each error naming the flag; what quill cannot
// run yet is refused naming the sizes; --sequence-parallel with one TP rank is off, with a note.
TEST(Cli, LayoutFlagsAreCheckedNamingTheFlag) {
  const std::string rows = temp("layout-rows");
  ASSERT_EQ(quill("data synth --conversations 100 --row-tokens 32 --max-rows 8 --out " + rows).status, 0);
  const std::string base = "train --config " + kSrc + "/configs/tiny.json --rows " + rows + " --steps 1 --global-batch 2 --quiet";
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"--tp 0", "--tensor-model-parallel-size must be at least 1, got 0"},
      {"--pp 2 --pp-layers 0,4", "--pp-layers: stage 0 has 0 layers"},
      {"--pp-layers 1,3", "--pp-layers names 2 stages, but --pipeline-model-parallel-size is 1"},
      {"--comm bogus", "--comm: 'bogus' is not auto, nccl or mpi"},
      {"--context-parallel-size 2", "context parallelism is not implemented yet"},
      {"--expert-model-parallel-size 2", "--expert-model-parallel-size 2 x --expert-tensor-parallel-size 1 = 2 does not "
                                         "divide the 1 ranks of a pipeline stage"},
      {"--etp 2", "quill builds expert tensor parallelism 1"},
  };
  for (const auto& [flags, message] : bad) {
    const std::string out = temp("layout-bad");
    CommandResult r = quill(base + " " + flags + " --out " + out);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << ": " << r.output;
    EXPECT_FALSE(fs::exists(out + "/metrics.jsonl")) << flags << ": wrote metrics before refusing";
  }
  CommandResult r = quill(base + " --sp --out " + temp("layout-sp"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--sequence-parallel with --tensor-model-parallel-size 1 has no effect"), std::string::npos)
      << r.output;
}
}  // namespace
