// `quill run` as a user meets it: the tiny demo recipe runs, is measured by the recipe's
// definitions and written back; a second run checked against the first passes the convergence
// check; a layout quill cannot run yet stops with a clear message and writes nothing.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>
#include <string>
#include <yaml-cpp/yaml.h>

#include "base/file_util.h"
#include "util/command.h"
#include "util/svg_check.h"

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
  // The picture: the trainer's panels, with the reference's loss and the measured window added.
  std::ifstream svg_file(b + "/run.svg");
  const std::string svg((std::istreambuf_iterator<char>(svg_file)), std::istreambuf_iterator<char>());
  EXPECT_EQ(quill::test::svg_problem(svg), "");
  for (const char* part : {">Loss<", ">Throughput<", ">reference<", ">measured window 5-13<", "14 records, steps 0-13"})
    EXPECT_NE(svg.find(part), std::string::npos) << part;
}

// A recipe's layout.offload and its run's precision-aware optimizer flags reach the trainer: the run
// offloads half of the optimizer state (logged) with bf16 moments, and its losses equal those of the
// same recipe with bf16 moments and no offload (offload moves the arithmetic, never changes it),
// which differ from the fp32-moment recipe's (the dtype flags are honoured).
TEST(QuillRun, RecipeOffloadAndMomentDtypesReachTheTrainer) {
  const std::string q = QUILL_BINARY, rows = temp("rows-offload");
  ASSERT_EQ(run(q + " data synth --input data/synthetic/conversations.jsonl --row-tokens 128 --out " + rows), 0);
  std::ifstream in(std::string(QUILL_SOURCE_DIR) + "/recipes/tiny-cpu.yaml");
  const std::string base((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto edited = [&](bool offload, const std::string& flags) {
    std::string text = base;
    if (offload) {
      const size_t at = text.find("  recompute: null\n");
      text.insert(at, "  offload:\n    optimizer_fraction: 0.5\n    overlap_d2h_h2d: true\n");
    }
    const std::string last = "--moe-token-dispatcher-type alltoall";
    text.insert(text.find(last) + last.size(), flags);
    const std::string path = temp(std::string("recipe-") + (offload ? "off" : "dev") + std::to_string(flags.size())) + ".yaml";
    std::ofstream(path) << text;
    return path;
  };
  const std::string bf16 = " --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16";
  const std::string a = edited(true, " --optimizer-cpu-offload --optimizer-offload-fraction 0.5 --overlap-cpu-optimizer-d2h-h2d" + bf16);
  const std::string b = edited(false, bf16), c = edited(false, "");
  std::map<std::string, std::vector<double>> losses;
  for (const std::string& recipe : {a, b, c}) {
    const std::string out = temp("offload-run" + std::to_string(losses.size()));
    std::string said;
    ASSERT_EQ(run(q + " run " + recipe + " --device cpu --set SFT_DATA=" + rows + " --steps 3 --out " + out, &said), 0) << said;
    if (recipe == a) {
      EXPECT_NE(said.find("optimizer memory: offload 0.5 (overlap), exp_avg bf16, exp_avg_sq bf16"), std::string::npos) << said;
      EXPECT_NE(said.find("optimizer offload: "), std::string::npos) << said;
    }
    std::ifstream m(out + "/metrics.jsonl");
    for (std::string line; std::getline(m, line);) {
      const size_t k = line.find("\"loss\":");
      ASSERT_NE(k, std::string::npos) << line;
      losses[recipe].push_back(std::stod(line.substr(k + 7)));
    }
  }
  ASSERT_EQ(losses[a].size(), 3u);
  EXPECT_EQ(losses[a], losses[b]);
  EXPECT_NE(losses[b], losses[c]);
}

size_t count_lines_with(const std::string& text, const std::string& what) {
  size_t n = 0;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) n += line.find(what) != std::string::npos;
  return n;
}

// The run's flags that quill accepts but does not carry out (logging services, launcher settings) are all
// named in one warning line, and the run goes on.
TEST(QuillRun, FlagsNotHonouredAreNamedInOneWarning) {
  const std::string q = QUILL_BINARY, rows = temp("rows-ignored"), out = temp("ignored-run");
  ASSERT_EQ(run(q + " data synth --input data/synthetic/conversations.jsonl --row-tokens 128 --out " + rows), 0);
  std::ifstream in(std::string(QUILL_SOURCE_DIR) + "/recipes/tiny-cpu.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const std::string last = "--moe-token-dispatcher-type alltoall";
  text.insert(text.find(last) + last.size(),
              " --use-wandb --wandb-project quill --wandb-key KEY --timing-log-level 2 --ray-address auto");
  const std::string recipe = temp("recipe-ignored") + ".yaml";
  std::ofstream(recipe) << text;
  std::string said;
  ASSERT_EQ(run(q + " run " + recipe + " --device cpu --set SFT_DATA=" + rows + " --steps 2 --out " + out, &said), 0)
      << said;
  EXPECT_EQ(count_lines_with(said, "not honoured"), 1u) << said;
  std::istringstream lines(said);
  for (std::string line; std::getline(lines, line);) {
    if (line.find("not honoured") == std::string::npos) continue;
    EXPECT_EQ(line.rfind("warning: not honoured (accepted, nothing done): ", 0), 0u) << line;
    for (const char* flag : {"--use-wandb", "--wandb-project", "--wandb-key", "--timing-log-level", "--ray-address"})
      EXPECT_NE(line.find(flag), std::string::npos) << flag << " missing from: " << line;
    EXPECT_NE(line.find("OUT/metrics.jsonl and OUT/run.svg"), std::string::npos) << line;
  }
}

TEST(QuillRun, CheckpointsOnlyWithSaveIntervalAndAnEarlierRunIsNotOverwritten) {
  const std::string q = QUILL_BINARY, rows = temp("rows-ckpt"), out = temp("ckpt");
  std::string said;
  ASSERT_EQ(run(q + " data synth --input data/synthetic/conversations.jsonl --row-tokens 128 --out " + rows), 0);
  const std::string cmd = q + " run recipes/tiny-cpu.yaml --device cpu --set SFT_DATA=" + rows + " --steps 3 --out " + out;
  ASSERT_EQ(run(cmd + " --save-interval 2", &said), 0) << said;
  EXPECT_TRUE(fs::exists(out + "/checkpoint/iter_0000003/state.json")) << said;
  EXPECT_TRUE(fs::exists(out + "/checkpoint/iter_0000002/state.json")) << said;
  EXPECT_EQ(quill::read_file(out + "/checkpoint/latest_checkpointed_iteration.txt"), "3\n") << said;
  EXPECT_EQ(run(cmd, &said), 1);
  EXPECT_NE(said.find("holds an earlier run"), std::string::npos) << said;
  ASSERT_EQ(run(cmd + " --overwrite", &said), 0) << said;
  EXPECT_FALSE(fs::exists(out + "/checkpoint"));
}

// The seed's layout (TP4 PP4 EP8 DP2, SP) passes the layout checks: it stops at its model directory
// (configs/ holds no config.json). With context parallelism (not built) the same recipe is refused
// naming the layout, before anything is written.
TEST(QuillRun, LayoutNotYetSupportedStopsClearly) {
  const std::string out_dir = temp("seed");
  const std::string flags = " --set HF_CKPT=configs --set SFT_DATA=x --set TORCH_DIST=x --out " + out_dir;
  std::string out;
  EXPECT_EQ(run(std::string(QUILL_BINARY) + " run tests/fixtures/recipes/seed.yaml" + flags, &out), 1);
  EXPECT_EQ(out.find("not implemented"), std::string::npos) << out;
  EXPECT_NE(out.find("configs"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(out_dir));

  std::ifstream in(std::string(QUILL_SOURCE_DIR) + "/tests/fixtures/recipes/seed.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const auto& [from, to] : {std::pair<std::string, std::string>{"  cp: 1\n", "  cp: 2\n"}, {"  dp: 2\n", "  dp: 1\n"}})
    text.replace(text.find(from), from.size(), to);
  const std::string recipe = temp("seed-cp2") + ".yaml";
  std::ofstream(recipe) << text;
  EXPECT_EQ(run(std::string(QUILL_BINARY) + " run " + recipe + flags, &out), 1);
  EXPECT_NE(out.find("TP4 PP4 EP8 DP2"), std::string::npos) << out;
  EXPECT_NE(out.find("context parallelism is not implemented yet"), std::string::npos) << out;
  EXPECT_FALSE(fs::exists(out_dir));
}

// quill's expert exchange is the alltoall dispatcher: a recipe naming another is refused, naming it,
// before anything is read or written.
TEST(QuillRun, ADispatcherOtherThanAlltoallIsRefused) {
  std::ifstream in(std::string(QUILL_SOURCE_DIR) + "/recipes/tiny-cpu.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  for (const std::string from : {"dispatcher: alltoall", "--moe-token-dispatcher-type alltoall"})
    text.replace(text.find(from), from.size(), from.substr(0, from.size() - 8) + "allgather");
  const std::string recipe = temp("recipe-allgather") + ".yaml", out = temp("allgather-run");
  std::ofstream(recipe) << text;
  std::string said;
  EXPECT_NE(run(std::string(QUILL_BINARY) + " run " + recipe + " --device cpu --set SFT_DATA=" + temp("no-rows") +
                    " --steps 1 --out " + out,
                &said),
            0);
  EXPECT_NE(said.find("the allgather token dispatcher is not implemented in quill (--moe-token-dispatcher-type alltoall"),
            std::string::npos)
      << said;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace

namespace {

// A reduced workload of the seed recipe (a small model on short rows): --row-tokens must be positive
// and agree with the rows, --global-batch positive; each refusal names the flag and writes nothing.
TEST(QuillRun, ReducedWorkloadFlagsAreChecked) {
  const std::string q = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows-reduced");
  ASSERT_EQ(run(q + " data synth --conversations 100 --row-tokens 32 --max-rows 16 --out " + rows), 0);
  const std::string base = q + " run " + src + "/tests/fixtures/recipes/seed.yaml --model-dir " + src +
                           "/configs/seed-shape --rows " + rows + " --device cpu";
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--row-tokens 0", "--row-tokens 0: must be positive"},
           {"--row-tokens 32 --global-batch -3", "--global-batch -3: must be positive"},
           {"--row-tokens 64", "rows of 32 tokens, but --row-tokens says 64"},
           {"", "rows of 32 tokens, but the recipe's workload.row_tokens says 8192"}}) {
    const std::string out = temp("reduced-bad");
    const quill::test::CommandResult r = quill::test::run_command(base + " " + flags + " --out " + out);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << ": " << r.output;
    EXPECT_FALSE(fs::exists(out + "/metrics.jsonl")) << flags;
  }
}

}  // namespace
