// `quill plan` against `quill train` on the CPU: the plan's allocator peak of every rank's stage
// equals the peak the training reports (summary.json's peak_device_bytes_per_rank) at one rank,
// DP2, PP2, PP2 on the six-layer tiny, TP2, TP2 with SP, TP2 SP x PP2, DP2 with half the optimizer
// state offloaded, bf16 moments, and full-layer recompute (one rank, PP2, TP2 with SP); and so does rank 0's optimizer state on the device; `quill train` refuses a layout that cannot fit
// --device-memory before writing anything, naming the categories and what would fit; the seed's
// layout prints its four stages; bad flags are named. FP8 with the stacked projections, one rank and TP2 SP.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "util/command.h"

namespace {

namespace fs = std::filesystem;

std::string temp(const std::string& name) {
  std::string d = (fs::temp_directory_path() / ("quill-plan-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  return d;
}

quill::test::CommandResult run(const std::string& cmd) { return quill::test::run_command("timeout 300 " + cmd); }

void run_ok(const std::string& cmd) {
  const quill::test::CommandResult r = run(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

TEST(PlanCli, PredictsTheMeasuredCpuPeakOfEveryRank) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows");
  run_ok(quill + " data synth --conversations 300 --row-tokens 200 --max-rows 16 --out " + rows);
  struct Case {
    std::string config, layout;
    int ranks;
    std::vector<int> stage_of_rank;
  };
  const std::vector<Case> cases = {
      {"configs/tiny.json", "", 1, {0}},
      {"configs/tiny.json", "--dp 2", 2, {0, 0}},
      {"configs/tiny.json", "--pp 2", 2, {0, 1}},
      {"tests/fixtures/configs/tiny6.json", "--pp 2 --pp-layers 2,4", 2, {0, 1}},
      {"configs/tiny.json", "--tp 2", 2, {0, 0}},
      {"configs/tiny.json", "--tp 2 --sp", 2, {0, 0}},
      {"configs/tiny.json", "--tp 2 --sp --pp 2", 4, {0, 0, 1, 1}},
      {"configs/tiny.json", "--dp 2 --optimizer-cpu-offload --optimizer-offload-fraction 0.5", 2, {0, 0}},
      {"configs/tiny.json", "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16", 1, {0}},
      // Recompute: a group keeps its input alone, and its backward runs its forward again first.
      {"configs/tiny.json", "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1", 1, {0}},
      {"tests/fixtures/configs/tiny6.json",
       "--pp 2 --pp-layers 2,4 --recompute-granularity full --recompute-method uniform --recompute-num-layers 3", 2, {0, 1}},
      {"configs/tiny.json", "--tp 2 --sp --recompute-granularity full --recompute-method block --recompute-num-layers 2", 2,
       {0, 0}},
      // Selective recompute: the modules' tensors dropped after the forward, made again in the backward (the
      // norms again, the gathered inputs gathered again, the SwiGLU outputs again).
      {"configs/tiny.json", "--recompute-granularity selective --recompute-modules moe_act layernorm", 1, {0}},
      {"configs/tiny.json", "--tp 2 --sp --tp-comm-overlap --recompute-granularity selective --recompute-modules moe_act "
       "layernorm", 2, {0, 0}},
      {"configs/tiny.json", "--tp 2 --recompute-granularity selective --recompute-modules layernorm", 2, {0, 0}},
      {"tests/fixtures/configs/tiny6.json",
       "--pp 2 --pp-layers 2,4 --recompute-granularity selective --recompute-modules moe_act", 2, {0, 1}},
      // --tp-comm-overlap: started collectives' results allocated earlier, their inputs kept to their waits.
      {"configs/tiny.json", "--tp 2 --sp --tp-comm-overlap", 2, {0, 0}},
      {"configs/tiny.json", "--tp 2 --sp --pp 2 --tp-comm-overlap", 4, {0, 0, 1, 1}},
      // --moe-expert-wgrad-micro-batches 2: a micro-batch's routed rows held until the next backward (across the
      // pipeline's forwards in between), then merged with the next one's.
      {"configs/tiny.json", "--moe-expert-wgrad-micro-batches 2", 1, {0}},
      {"tests/fixtures/configs/tiny6.json", "--pp 2 --pp-layers 2,4 --moe-expert-wgrad-micro-batches 2", 2, {0, 1}},
      {"configs/tiny.json", "--tp 2 --sp --tp-comm-overlap --moe-expert-wgrad-micro-batches 2 --recompute-granularity "
       "selective --recompute-modules moe_act layernorm", 2, {0, 0}},
      // FP8 with the attention projections stacked: their joined copy beside the four, one GEMM's [T, Z] output
      // in the forward (per gathered chunk under --tp-comm-overlap), the stacked gradient in the backward.
      {"tests/fixtures/configs/fp8-stack.json", "--fp8-format e4m3 --fp8-recipe blockwise", 1, {0}},
      {"tests/fixtures/configs/fp8-stack.json", "--fp8-format e4m3 --fp8-recipe blockwise --tp 2 --sp --tp-comm-overlap",
       2, {0, 0}},
  };
  int index = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.config + " " + c.layout);
    const std::string out = temp("run" + std::to_string(index++));
    const std::string common = " --config " + src + "/" + c.config + " --rows " + rows + " --global-batch 4 " + c.layout;
    const std::string launcher = c.ranks > 1 ? std::string(QUILL_MPIEXEC) + " -np " + std::to_string(c.ranks) + " " : "";
    run_ok(launcher + quill + " train" + common + " --steps 2 --seed 5 --quiet --out " + out);
    const quill::test::CommandResult planned = run(quill + " plan --device cpu --json" + common);
    ASSERT_EQ(planned.status, 0) << planned.output;
    const nlohmann::json plan = nlohmann::json::parse(planned.output);
    const nlohmann::json summary = read_json(out + "/summary.json");
    ASSERT_TRUE(summary.contains("peak_device_bytes_per_rank")) << summary.dump();
    const std::vector<int64_t> measured = summary["peak_device_bytes_per_rank"].get<std::vector<int64_t>>();
    ASSERT_EQ(measured.size(), static_cast<size_t>(c.ranks));
    for (int r = 0; r < c.ranks; ++r) {
      const int64_t predicted = plan["stages"][c.stage_of_rank[static_cast<size_t>(r)]]["allocator_peak_bytes"].get<int64_t>();
      std::printf("%s %s rank %d: predicted %lld bytes, measured %lld\n", c.config.c_str(), c.layout.c_str(), r,
                  static_cast<long long>(predicted), static_cast<long long>(measured[static_cast<size_t>(r)]));
      // The issue asks 10%; on the CPU the plan is the model's allocation sequence: equal.
      EXPECT_EQ(predicted, measured[static_cast<size_t>(r)]) << "rank " << r;
    }
    // Rank 0's optimizer state on the device (its masters apart from the compute copies and moments).
    const nlohmann::json& s0 = plan["stages"][0];
    EXPECT_EQ(s0["master_weights_bytes"].get<int64_t>() + s0["moment_bytes"].get<int64_t>(),
              summary["optimizer_state_bytes_rank0"]["device"].get<int64_t>());
  }
}

TEST(PlanCli, TrainRefusesALayoutThatCannotFitBeforeWritingAnything) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows-fit"), out = temp("refused");
  run_ok(quill + " data synth --conversations 300 --row-tokens 128 --max-rows 8 --out " + rows);
  const std::string flags = " train --config " + src + "/configs/tiny.json --rows " + rows + " --steps 1 --global-batch 2 --quiet";
  const quill::test::CommandResult refused = run(quill + flags + " --device-memory 2MiB --out " + out);
  EXPECT_NE(refused.status, 0);
  for (const char* needle : {"does not fit the device's memory", "stage 0", "Adam moments", "2.00 MiB",
                             "--optimizer-offload-fraction", "--exp-avg-dtype bf16"})
    EXPECT_NE(refused.output.find(needle), std::string::npos) << needle << " in:\n" << refused.output;
  EXPECT_FALSE(fs::exists(out)) << "a refused run wrote " << out;
  const quill::test::CommandResult fits = run(quill + flags + " --device-memory 1GiB --out " + out);
  EXPECT_EQ(fits.status, 0) << fits.output;
  EXPECT_NE(fits.output.find("note: memory plan: stage 0 needs"), std::string::npos) << fits.output;
  const quill::test::CommandResult bad = run(quill + flags + " --device-memory lots --out " + out + "x");
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--device-memory: 'lots' is not a size"), std::string::npos) << bad.output;
}

TEST(PlanCli, PlansTheSeedLayoutFromItsRecipe) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR;
  const std::string cmd = quill + " plan " + src + "/tests/fixtures/recipes/seed.yaml --config " + src +
                          "/tests/fixtures/configs/inkling-small-release.json";
  const quill::test::CommandResult table = run(cmd);
  ASSERT_EQ(table.status, 0) << table.output;
  for (const char* needle : {"tp 4 sp cp 1 dp 2 pp 4 (12/10/10/10) ep 8 etp 1", "offload 0.7", "stage 3 (last)",
                             "0-11: 2 dense + 10 MoE", "4 / 64", "pinned host memory per node (8 GPUs)"})
    EXPECT_NE(table.output.find(needle), std::string::npos) << needle << " in:\n" << table.output;
  const quill::test::CommandResult json = run(cmd + " --json --optimizer-cpu-offload --optimizer-offload-fraction 0");
  ASSERT_EQ(json.status, 1) << "a layout that does not fit exits 1 after its report\n" << json.output;
  const nlohmann::json j = nlohmann::json::parse(json.output);
  ASSERT_EQ(j["stages"].size(), 4u);
  EXPECT_EQ(j["stages"][0]["in_flight"], 4);
  EXPECT_EQ(j["stages"][3]["in_flight"], 1);
  EXPECT_FALSE(j["fits"].get<bool>());  // without offload the first stage needs more than an H200 (issue 19)
  EXPECT_EQ(j["stages"][0]["host_optimizer_bytes"], 0);
}

TEST(PlanCli, NamesWhatIsMissing) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR;
  const quill::test::CommandResult no_rows = run(quill + " plan --config " + src + "/configs/tiny.json");
  EXPECT_NE(no_rows.status, 0);
  EXPECT_NE(no_rows.output.find("--row-tokens"), std::string::npos) << no_rows.output;
  const quill::test::CommandResult bad_tp = run(quill + " plan --config " + src + "/configs/tiny.json --row-tokens 64 --tp 3");
  EXPECT_NE(bad_tp.status, 0);
  EXPECT_NE(bad_tp.output.find("--tensor-model-parallel-size 3"), std::string::npos) << bad_tp.output;
}

TEST(PlanCli, ACountOfZeroOrLessIsRefusedNamingTheFlagAndValue) {
  // Issue 44: `quill plan --row-tokens 0` said "give --rows (its manifest's row length) or --row-tokens",
  // although it was given; quill tune and quill project took some such values silently (rc 0), and
  // quill train's --simulate-rank -1 printed the largest double as CLI11's bound.
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, tiny = src + "/configs/tiny.json";
  const std::string plan = quill + " plan --config " + tiny, tune = quill + " tune --model " + tiny + " --gpus 2";
  const std::string train = quill + " train --config " + tiny + " --rows " + temp("no-rows") + " --steps 1 --global-batch 1 --out " +
                            temp("no-out");
  for (const auto& [cmd, said] : std::vector<std::pair<std::string, std::string>>{
           {plan + " --row-tokens 0", "--row-tokens must be positive, got 0"},
           {plan + " --row-tokens -5", "--row-tokens must be positive, got -5"},
           {plan + " --rows " + temp("no-rows") + " --row-tokens 0", "--row-tokens must be positive, got 0"},
           {plan + " --row-tokens 64 --global-batch 0", "--global-batch must be positive, got 0"},
           {plan + " --row-tokens 64 --tp 2 --tp-comm-overlap",
            "--tp-comm-overlap needs --tensor-model-parallel-size above 1 with --sequence-parallel"},
           {tune + " --top 0", "--top must be positive, got 0"},
           {tune + " --max-split-imbalance -1", "--max-split-imbalance must be 0 or more, got -1"},
           {tune + " --measure-timeout -1", "--measure-timeout must be 0 or more, got -1"},
           {quill + " project " + temp("no-run") + " --global-batch -4", "--global-batch must be positive, got -4"},
           {train + " --simulate-rank -1", "--simulate-rank must be 0 or more (a world rank of the layout), got -1"},
           {train + " --profile-ceilings 794 0", "--profile-ceilings must be positive, got 0"}}) {
    const quill::test::CommandResult r = run(cmd);
    EXPECT_EQ(r.status, 1) << cmd << "\n" << r.output;
    EXPECT_NE(r.output.find("quill: error: " + said), std::string::npos) << cmd << "\n" << r.output;
  }
}

}  // namespace
