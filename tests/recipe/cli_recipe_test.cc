// `quill recipe validate`, `quill check convergence` and `quill check config` as a user runs them:
// the output and the exit status.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "base/file_util.h"
#include "recipe_test_util.h"

namespace quill {
namespace {

struct CliRun {
  int status;
  std::string out;  // stdout only
};

CliRun quill(const std::string& args) {
  const std::string cmd = std::string(QUILL_BINARY) + " " + args + " 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  std::string out;
  std::array<char, 4096> buf;
  while (size_t n = fread(buf.data(), 1, buf.size(), pipe)) out.append(buf.data(), n);
  int status = pclose(pipe);
  return {WEXITSTATUS(status), out};
}

TEST(CliRecipe, SeedValidatesWithWarnings) {
  CliRun r = quill("recipe validate " + test::seed_path());
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(r.out.find("problem:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warning: layout.recompute:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("warning: run: flag --debug-train-only is not understood"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("seed.yaml: valid (0 problems"), std::string::npos) << r.out;
}

TEST(CliRecipe, BrokenRecipeFailsWithOneProblemPerLine) {
  std::string text = read_file(test::seed_path());
  test::replace_once(text, "  count: 32\n", "  count: 16\n");
  test::replace_once(text, "  global_batch: 128\n", "  global_batch: 127\n");
  const std::string path = test::temp_path("broken.yaml");
  write_file_atomic(path, text);
  CliRun r = quill("recipe validate " + path);
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("problem: layout: world tp x pp x cp x dp = 4 x 4 x 1 x 2 = 32 differs from gpu.count 16\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("problem: workload.global_batch: 127 is not a multiple"), std::string::npos) << r.out;
}

TEST(CliRecipe, FlagsPrintsTheRunDefinition) {
  CliRun r = quill("recipe flags " + test::seed_path() + " --set HF_CKPT=/ckpt");
  ASSERT_EQ(r.status, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["definition"]["lr"], 1e-5);
  EXPECT_EQ(j["definition"]["train_steps"], 20);
  EXPECT_EQ(j["definition"]["hf_checkpoint"], "/ckpt");
  EXPECT_EQ(j["unknown"].size(), 3u);
  EXPECT_EQ(j["unexpanded"][0]["array"], "MODEL_ARGS");
}

TEST(CliRecipe, FormatRoundTrips) {
  const std::string out = test::temp_path("formatted.yaml");
  CliRun r = quill("recipe format " + test::seed_path() + " --out " + out);
  ASSERT_EQ(r.status, 0);
  CliRun again = quill("recipe validate " + out);
  EXPECT_EQ(again.status, 0) << again.out;
}

TEST(CliCheck, ConvergencePassAndFail) {
  const std::string ref = test::temp_path("ref.jsonl"), good = test::temp_path("good.txt"),
                    bad = test::temp_path("bad.txt");
  std::string ref_text, good_text, bad_text;
  for (int i = 0; i < 20; ++i) {
    double g = 3.0 - 0.1 * i;
    ref_text += "{\"step\": " + std::to_string(i) + ", \"loss\": " + std::to_string(g) + ", \"grad_norm\": 1.0}\n";
    good_text += std::to_string(g * 1.001) + "\n";
    bad_text += std::to_string(i == 19 ? g * 1.2 : g) + "\n";
  }
  write_file_atomic(ref, ref_text);
  write_file_atomic(good, good_text);
  write_file_atomic(bad, bad_text);
  CliRun pass = quill("check convergence --candidate " + good + " --reference " + ref);
  EXPECT_EQ(pass.status, 0) << pass.out;
  auto j = nlohmann::json::parse(pass.out);
  EXPECT_EQ(j["result"], "pass");
  EXPECT_EQ(j["compared"], 16);
  CliRun fail = quill("check convergence --candidate " + bad + " --reference " + ref);
  EXPECT_EQ(fail.status, 1) << fail.out;
  auto k = nlohmann::json::parse(fail.out);
  EXPECT_EQ(k["checks"]["final_loss"], "fail");
}

TEST(CliCheck, ConfigPassAndFail) {
  std::string text = read_file(test::seed_path());
  test::replace_once(text, "  tp: 4\n", "  tp: 2\n");
  const std::string layout = test::temp_path("layout.yaml");
  write_file_atomic(layout, text);
  CliRun pass = quill("check config " + layout + " " + test::seed_path());
  EXPECT_EQ(pass.status, 0) << pass.out;
  auto j = nlohmann::json::parse(pass.out);
  EXPECT_EQ(j["differences"][0]["setting"], "layout.tp");
  EXPECT_EQ(j["differences"][0]["class"], "placement");

  test::replace_once(text, "--lr 1e-5", "--lr 3e-5");
  const std::string lr = test::temp_path("lr.yaml");
  write_file_atomic(lr, text);
  CliRun fail = quill("check config " + lr + " " + test::seed_path());
  EXPECT_EQ(fail.status, 1) << fail.out;
  EXPECT_NE(fail.out.find("\"numerics\""), std::string::npos) << fail.out;
}

}  // namespace
}  // namespace quill
