// `quill run` as a user meets it: the tiny demo recipe runs, is measured by the recipe's
// definitions and written back; a second run checked against the first passes the convergence
// check; a layout quill cannot run yet stops with a clear message and writes nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>
#include <yaml-cpp/yaml.h>
#include "util/command.h"

namespace {

namespace fs = std::filesystem;

int run(const std::string& cmd, std::string* output = nullptr) {
  const quill::test::CommandResult r = quill::test::run_command("cd " + std::string(QUILL_SOURCE_DIR) + " && " + cmd);
  if (output) *output = r.output;
  return r.status;
}

std::string temp(const std::string& name) {
  std::string d = (fs::temp_directory_path() / ("quill-run-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  return d;
}

TEST(QuillRun, TinyRecipeIsMeasuredCheckedAndWritten) {
  const std::string q = QUILL_BINARY, rows = temp("rows"), a = temp("a"), b = temp("b");
  std::string out;
  ASSERT_EQ(run(q + " data synth --input data/synthetic/conversations.jsonl --row-tokens 128 --out " + rows), 0);
  const std::string cmd = q + " run recipes/tiny-cpu.yaml --device cpu --set SFT_DATA=" + rows + " --steps 14 --out ";
  ASSERT_EQ(run(cmd + a, &out), 0) << out;
  EXPECT_NE(out.find("tokens/s/GPU"), std::string::npos) << out;
  ASSERT_TRUE(fs::exists(a + "/recipe.yaml") && fs::exists(a + "/metrics.jsonl") && fs::exists(a + "/run.svg"));
  EXPECT_FALSE(fs::exists(a + "/checkpoint")) << "a benchmark writes no training checkpoint unless asked";

  const YAML::Node r = YAML::LoadFile(a + "/recipe.yaml");
  EXPECT_GT(r["result"]["tokens_per_s_per_gpu"].as<double>(), 0);
  EXPECT_EQ(r["result"]["window"][0].as<int>(), 5);
  EXPECT_EQ(r["result"]["window"][1].as<int>(), 13);
  EXPECT_EQ(r["result"]["window_tokens"].as<int64_t>(), 9 * 4 * 128);
  EXPECT_EQ(r["result"]["active_params"]["count"].as<int64_t>(), 171040);
  EXPECT_EQ(r["correctness"]["result"].as<std::string>(), "not checked");
  EXPECT_EQ(r["workload"]["row_tokens"].as<int>(), 128);  // the seed's fields survive
  EXPECT_TRUE(r["run"].IsScalar());
  // GPU-hours and the price: a CPU hour has no price in quill's table, so no cost is made up.
  EXPECT_GT(r["result"]["gpu_hours"].as<double>(), 0);
  EXPECT_TRUE(r["result"]["usd_per_gpu_hour"].IsNull());
  EXPECT_TRUE(r["result"]["usd_per_million_tokens"].IsNull());
  EXPECT_EQ(r["result"]["usd_per_gpu_hour_source"].as<std::string>().rfind("none: quill's table prices no CPU", 0), 0u);

  // The same run again, against the first: deterministic on the CPU, so every check passes. With a
  // price given on the command line, the completed recipe states it, its source and the cost.
  ASSERT_EQ(run(cmd + b + " --reference " + a + " --price-per-gpu-hour 2.5", &out), 0) << out;
  EXPECT_NE(out.find("at $2.500 per GPU-hour, from the --price-per-gpu-hour flag"), std::string::npos) << out;
  const YAML::Node rb = YAML::LoadFile(b + "/recipe.yaml");
  EXPECT_EQ(rb["result"]["usd_per_gpu_hour"].as<double>(), 2.5);
  EXPECT_EQ(rb["result"]["usd_per_gpu_hour_source"].as<std::string>(), "the --price-per-gpu-hour flag");
  EXPECT_NEAR(rb["result"]["usd_per_million_tokens"].as<double>(),
              2.5 / (rb["result"]["tokens_per_s_per_gpu"].as<double>() * 3600) * 1e6, 0.006);
  EXPECT_EQ(rb["correctness"]["convergence"]["result"].as<std::string>(), "pass");
  EXPECT_EQ(rb["correctness"]["configuration"].as<std::string>(), "pass");
  EXPECT_NEAR(rb["correctness"]["convergence"]["correlation"].as<double>(), 1.0, 1e-12);
}

TEST(QuillRun, CheckpointsOnlyWithSaveIntervalAndAnEarlierRunIsNotOverwritten) {
  const std::string q = QUILL_BINARY, rows = temp("rows-ckpt"), out = temp("ckpt");
  std::string said;
  ASSERT_EQ(run(q + " data synth --input data/synthetic/conversations.jsonl --row-tokens 128 --out " + rows), 0);
  const std::string cmd = q + " run recipes/tiny-cpu.yaml --device cpu --set SFT_DATA=" + rows + " --steps 3 --out " + out;
  ASSERT_EQ(run(cmd + " --save-interval 2", &said), 0) << said;
  EXPECT_TRUE(fs::exists(out + "/checkpoint/state.json")) << said;
  EXPECT_EQ(run(cmd, &said), 1);
  EXPECT_NE(said.find("holds an earlier run"), std::string::npos) << said;
  ASSERT_EQ(run(cmd + " --overwrite", &said), 0) << said;
  EXPECT_FALSE(fs::exists(out + "/checkpoint"));
}

TEST(QuillRun, LayoutNotYetSupportedStopsClearly) {
  const std::string out_dir = temp("seed");
  std::string out;
  EXPECT_EQ(run(std::string(QUILL_BINARY) + " run tests/fixtures/recipes/seed.yaml --set HF_CKPT=configs " +
                    "--set SFT_DATA=x --set TORCH_DIST=x --out " + out_dir,
                &out),
            1);
  EXPECT_NE(out.find("TP4 PP4 EP8 DP2"), std::string::npos) << out;
  EXPECT_NE(out.find("not implemented"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(out_dir));
}

}  // namespace
