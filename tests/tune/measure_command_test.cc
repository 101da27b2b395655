// `quill tune --measure K` (cli/tune_measure.h) on the CPU: tests/fixtures/configs/tiny-tp4.json on 4 CPU
// "GPUs" with 2 MiB each, where the two best layouts are PP4 (first, two middle and a last stage: three
// runs each, the second middle stage scaled). The children are real `quill train --simulate-rank` runs.
//   (a) the figures the output calls measured are those of the children's run directories (read back here
//       from summary.json), every figure is marked measured, scaled or modelled, the peaks sit beside the
//       plan's;
//   (b) a second call with the same --measure-dir runs nothing and changes no run directory (and
//       --emit-recipe writes the measured best); --measure-only
//       runs one stage, leaves the candidates incomplete, and a later call completes them;
//   (c) a candidate whose run fails (device memory too small for it alone, or a time limit) is reported
//       failed with the reason and the rest still rank;
//   (d) the measured ranking is by the measured figures (sorted by its own tokens/s/GPU, each from its own
//       projected step).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <utility>

#include "util/command.h"
#include "util/run_dir.h"

namespace quill::tune {
namespace {

namespace fs = std::filesystem;
const std::string kSrc = QUILL_SOURCE_DIR, kQuill = QUILL_BINARY;

class TuneMeasure : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::string(test::fresh_temp_dir("tune-measure", "suite"));
    fs::create_directories(*dir_);
    // Slow modelled rates (the CPU's order of magnitude) and a slow "NVLink" whose latency makes TP costly,
    // so that the best layouts in 2 MiB are pipelined.
    std::ofstream(*dir_ + "/rates.json")
        << R"({"dense_gemm_tflops": 0.01, "grouped_gemm_tflops": 0.01, "attention_global_fwd_tflops": 0.01,
 "attention_global_bwd_tflops": 0.01, "attention_local_fwd_tflops": 0.01, "attention_local_bwd_tflops": 0.01,
 "loss_gbps": 1, "region_ms_per_row_layer": 0, "split_ms_per_row_layer": 0, "gaps_ms_per_row_layer": 0,
 "adamw_gbps": 1, "sum_squares_gbps": 1, "host_adamw_gelements_per_s": 1, "pcie_gbps": 10, "source": "test rates"})";
  }
  static void TearDownTestSuite() {
    fs::remove_all(*dir_);
    delete dir_;
  }
  static std::string tune(const std::string& flags) {
    return "timeout 300 " + kQuill + " tune --model " + kSrc +
           "/tests/fixtures/configs/tiny-tp4.json --gpus 4 --gpus-per-node 4 --gpu cpu --device-memory 2MiB "
           "--row-tokens 64 --global-batch 16 --nvlink-latency-us 2000 --top 3 --compute-rates " +
           *dir_ + "/rates.json " + (flags.find("--measure ") != std::string::npos ? "--measure-device cpu " : "") + flags;
  }
  // The command's JSON: its stdout alone (the progress goes to stderr, kept in a file for the failure).
  static nlohmann::json tune_json(const std::string& flags) {
    const std::string err = *dir_ + "/stderr.txt";
    const test::CommandResult r = test::run_command("( " + tune(flags + " --json") + " 2>" + err + " )");
    std::ifstream in(err);
    const std::string progress((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(r.status, 0) << r.output << progress;
    return nlohmann::json::parse(r.output);
  }
  static std::string* dir_;
};
std::string* TuneMeasure::dir_ = nullptr;

// What cli/simulated_run.h takes from a run directory, computed here from its summary.json.
struct RunFigures {
  double passes_per_micro_batch_s = 0, optimizer_s = 0;
  int64_t peak = -1;
};
RunFigures read_back(const std::string& dir, int rank, int64_t micro_batches) {
  const nlohmann::json s = test::read_json(dir + "/summary.json");
  EXPECT_EQ(s.at("simulated_rank"), rank) << dir;
  // The loopback's copies per step and phase, which the measured figures leave out (docs/decisions/loopback-time.md).
  std::map<std::pair<int64_t, std::string>, double> copies;
  const nlohmann::json collectives = test::read_json(dir + "/collectives.json");
  for (const nlohmann::json& t : collectives.at("loopback_copy_s"))
    copies[{t.at("step").get<int64_t>(), t.at("phase").get<std::string>()}] += t.at("seconds").get<double>();
  std::vector<double> passes, rest;
  for (const nlohmann::json& st : s.at("per_step")) {
    const int64_t step = st.at("step");
    if (step >= s.at("warmup_steps").get<int64_t>()) {
      const double p = st.at("passes_time_s");
      passes.push_back(p - copies[{step, "passes"}]);
      rest.push_back(st.at("step_time_s").get<double>() - p - copies[{step, "optimizer"}]);
    }
  }
  EXPECT_EQ(passes.size(), 1u) << dir << ": 2 steps, 1 warm-up";
  RunFigures f;
  if (passes.empty()) return f;
  f.passes_per_micro_batch_s = passes[0] / static_cast<double>(micro_batches);
  f.optimizer_s = std::max(0.0, rest[0]);
  f.peak = s.at("peak_device_bytes_per_rank").at(rank);
  return f;
}

std::map<std::string, fs::file_time_type> mtimes(const std::string& dir) {
  std::map<std::string, fs::file_time_type> out;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[e.path().string()] = e.last_write_time();
  return out;
}

TEST_F(TuneMeasure, MeasuredFiguresAreTheRunsAndReuseRunsNothing) {
  const std::string runs = *dir_ + "/runs-a";
  const nlohmann::json j = tune_json("--measure 2 --measure-dir " + runs);
  // The modelled ranking says so, stage by stage.
  ASSERT_GE(j.at("ranked").size(), 2u);
  for (const nlohmann::json& r : j.at("ranked")) {
    EXPECT_EQ(r.at("compute_source"), "modelled");
    for (const nlohmann::json& s : r.at("stages")) EXPECT_EQ(s.at("source"), "modelled");
  }
  for (int i = 0; i < 2; ++i)
    ASSERT_EQ(j.at("ranked")[i].at("pp"), 4) << "the test expects PP4 at the top of the modelled ranking:\n"
                                             << j.at("ranked")[i].dump(1);
  const nlohmann::json& m = j.at("measured");
  EXPECT_EQ(m.at("runs_started"), 6);
  EXPECT_EQ(m.at("runs_reused"), 0);
  EXPECT_EQ(m.at("runs_failed"), 0);
  EXPECT_EQ(m.at("kept"), true);
  ASSERT_EQ(m.at("candidates").size(), 2u);
  ASSERT_EQ(m.at("ranked").size(), 2u);
  std::map<int, nlohmann::json> by_modelled_rank;
  for (const nlohmann::json& r : m.at("ranked")) by_modelled_rank[r.at("modelled_rank").get<int>()] = r;
  for (const nlohmann::json& c : m.at("candidates")) {
    SCOPED_TRACE(c.at("layout").get<std::string>() + " " + c.at("optimizer").get<std::string>());
    EXPECT_EQ(c.at("status"), "measured");
    const int modelled_rank = c.at("modelled_rank");
    const nlohmann::json& ranked = by_modelled_rank.at(modelled_rank);
    const nlohmann::json& modelled = j.at("ranked")[modelled_rank - 1];
    EXPECT_EQ(ranked.at("layout"), modelled.at("layout"));
    EXPECT_EQ(ranked.at("compute_source"), "measured");
    EXPECT_EQ(ranked.at("compute"), "measured (stages 0,1,3; 2 scaled)");
    EXPECT_EQ(ranked.at("comm_source"), "modelled");
    const int64_t micro_batches = 16 / modelled.at("dp").get<int64_t>();
    ASSERT_EQ(c.at("runs").size(), 3u);
    std::map<int, RunFigures> figures;
    for (const nlohmann::json& run : c.at("runs")) {
      const int stage = run.at("stage"), rank = run.at("rank");
      SCOPED_TRACE("stage " + std::to_string(stage));
      EXPECT_EQ(run.at("status"), "measured");
      const RunFigures f = read_back(run.at("dir"), rank, micro_batches);
      figures[stage] = f;
      const nlohmann::json& got = run.at("measured");
      EXPECT_EQ(got.at("source"), "measured");
      EXPECT_DOUBLE_EQ(got.at("compute_per_micro_batch_s").get<double>(), f.passes_per_micro_batch_s);
      EXPECT_DOUBLE_EQ(got.at("optimizer_compute_s").get<double>(), f.optimizer_s);
      EXPECT_EQ(got.at("peak_device_bytes").get<int64_t>(), f.peak);
      // Beside the plan's prediction of the same stage (on the CPU the allocator peaks agree byte for byte).
      EXPECT_EQ(run.at("modelled").at("plan_allocator_peak_bytes"), modelled.at("stages")[stage].at("plan_allocator_peak_bytes"));
      EXPECT_EQ(run.at("modelled").at("plan_allocator_peak_bytes").get<int64_t>(), f.peak);
      EXPECT_DOUBLE_EQ(got.at("compute_ratio").get<double>(),
                       f.passes_per_micro_batch_s / run.at("modelled").at("compute_per_micro_batch_s").get<double>());
      // The projection used them.
      const nlohmann::json& st = ranked.at("stages")[stage];
      EXPECT_EQ(st.at("source"), "measured");
      EXPECT_DOUBLE_EQ(st.at("compute_per_micro_batch_s").get<double>(), f.passes_per_micro_batch_s);
      EXPECT_DOUBLE_EQ(st.at("optimizer_compute_s").get<double>(), f.optimizer_s);
      EXPECT_DOUBLE_EQ(st.at("modelled_compute_per_micro_batch_s").get<double>(),
                       modelled.at("stages")[stage].at("compute_per_micro_batch_s").get<double>());
      // The children ran the layout's flags.
      const std::vector<std::string> argv = run.at("argv");
      EXPECT_NE(std::find(argv.begin(), argv.end(), "--simulate-rank"), argv.end());
      EXPECT_NE(std::find(argv.begin(), argv.end(), "--pp"), argv.end());
    }
    // Stage 2 (a middle stage not run): its modelled compute times stage 1's measured ratio.
    const nlohmann::json& s2 = ranked.at("stages")[2];
    EXPECT_EQ(s2.at("source"), "scaled");
    EXPECT_EQ(s2.at("from_stage"), 1);
    const double ratio1 = figures[1].passes_per_micro_batch_s /
                          modelled.at("stages")[1].at("compute_per_micro_batch_s").get<double>();
    EXPECT_NEAR(s2.at("compute_per_micro_batch_s").get<double>(),
                ratio1 * modelled.at("stages")[2].at("compute_per_micro_batch_s").get<double>(), 1e-15);
    // (d) Its tokens/s/GPU from its own projected step.
    EXPECT_NEAR(ranked.at("tokens_per_s_per_gpu").get<double>(), 16.0 * 64 / ranked.at("step_s").get<double>() / 4, 1e-9);
    EXPECT_DOUBLE_EQ(c.at("measured_tokens_per_s_per_gpu").get<double>(), ranked.at("tokens_per_s_per_gpu").get<double>());
  }
  // (d) The measured ranking is sorted by its measured figures.
  EXPECT_GE(m.at("ranked")[0].at("tokens_per_s_per_gpu").get<double>(), m.at("ranked")[1].at("tokens_per_s_per_gpu").get<double>());
  EXPECT_EQ(m.at("ranked")[0].at("rank"), 1);

  // (b) Again with the same directory: nothing runs, no file changes, the same figures.
  const auto before = mtimes(runs);
  const std::string recipe = *dir_ + "/best.yaml";
  const test::CommandResult again = test::run_command(tune("--measure 2 --measure-dir " + runs + " --emit-recipe " + recipe));
  ASSERT_EQ(again.status, 0) << again.output;
  // The recipe is the measured ranking's best, and says what was measured.
  EXPECT_NE(again.output.find("recipe of the measured ranking's rank 1 in"), std::string::npos) << again.output;
  std::ifstream in(recipe);
  const std::string yaml((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // (The notes are a literal block: the summary's folded lines may break anywhere.)
  EXPECT_NE(yaml.find(fmt::format("{:.1f} tokens/s/GPU, MFU", m.at("ranked")[0].at("tokens_per_s_per_gpu").get<double>())),
            std::string::npos)
      << yaml;
  EXPECT_NE(yaml.find("the compute of its stages measured by `quill tune --measure` with random weights"), std::string::npos)
      << yaml;
  for (const char* want : {"0 runs started, 6 reused, 0 failed", "reused", "measured (stages 0,1,3; 2 scaled)",
                           "every figure of this table is MODELLED", "compute MEASURED where the compute column says so",
                           "passes mod", "plan peak", "run peak"})
    EXPECT_NE(again.output.find(want), std::string::npos) << want << "\n" << again.output;
  EXPECT_FALSE(std::regex_search(again.output, std::regex("--simulate-rank [0-9]+ \\.\\.\\."))) << "a run started:\n"
                                                                                         << again.output;
  EXPECT_EQ(mtimes(runs), before);
  const nlohmann::json j2 = tune_json("--measure 2 --measure-dir " + runs);
  EXPECT_EQ(j2.at("measured").at("runs_started"), 0);
  EXPECT_EQ(j2.at("measured").at("runs_reused"), 6);
  EXPECT_EQ(j2.at("measured").at("ranked"), m.at("ranked"));
}

TEST_F(TuneMeasure, MeasureOnlyRunsOneStageAndALaterCallCompletesTheRest) {
  const std::string runs = *dir_ + "/runs-only";
  nlohmann::json j = tune_json("--measure 2 --measure-dir " + runs + " --measure-only 2:1");
  const nlohmann::json& m = j.at("measured");
  EXPECT_EQ(m.at("runs_started"), 1);
  EXPECT_TRUE(m.at("ranked").empty());
  for (const nlohmann::json& c : m.at("candidates")) {
    EXPECT_EQ(c.at("status"), "incomplete");
    EXPECT_NE(c.at("reason").get<std::string>().find("--measure-only"), std::string::npos) << c.dump(1);
    for (const nlohmann::json& run : c.at("runs"))
      EXPECT_EQ(run.at("status"), c.at("modelled_rank") == 2 && run.at("stage") == 1 ? "measured" : "not run");
  }
  j = tune_json("--measure 2 --measure-dir " + runs);
  EXPECT_EQ(j.at("measured").at("runs_started"), 5);
  EXPECT_EQ(j.at("measured").at("runs_reused"), 1);
  EXPECT_EQ(j.at("measured").at("ranked").size(), 2u);
  // Refused before the search, naming the flag.
  const test::CommandResult bad = test::run_command(tune("--measure 2 --measure-only 3:0"));
  EXPECT_NE(bad.status, 0);
  EXPECT_NE(bad.output.find("--measure-only 3:0"), std::string::npos) << bad.output;
  EXPECT_EQ(bad.output.find("rank  layout"), std::string::npos) << bad.output;
}

TEST_F(TuneMeasure, AFailedRunIsReportedAndTheRestStillRank) {
  // The device memory of the runs between the two candidates' largest stages: the larger one is refused.
  const nlohmann::json modelled = tune_json("");
  EXPECT_TRUE(modelled.at("measured").is_null());
  auto largest = [&](int i) {
    int64_t most = 0;
    for (const nlohmann::json& s : modelled.at("ranked")[i].at("stages")) most = std::max(most, s.at("peak_device_bytes").get<int64_t>());
    return most;
  };
  const int64_t a = largest(0), b = largest(1);
  ASSERT_NE(a, b);
  const int fails = a > b ? 1 : 2;
  const std::string runs = *dir_ + "/runs-fail";
  const nlohmann::json j = tune_json("--measure 2 --measure-dir " + runs + " --measure-device-memory " +
                                     std::to_string((a + b) / 2));
  const nlohmann::json& m = j.at("measured");
  EXPECT_EQ(m.at("runs_failed"), 1);
  ASSERT_EQ(m.at("candidates").size(), 2u);
  for (const nlohmann::json& c : m.at("candidates")) {
    SCOPED_TRACE(c.dump(1));
    if (c.at("modelled_rank") == fails) {
      EXPECT_EQ(c.at("status"), "failed");
      EXPECT_NE(c.at("reason").get<std::string>().find("exit status 1: the layout does not fit the device's memory"),
                std::string::npos);
      EXPECT_FALSE(c.contains("measured_tokens_per_s_per_gpu"));
      EXPECT_EQ(c.at("runs")[0].at("status"), "failed");
      EXPECT_EQ(c.at("runs")[1].at("status"), "not run");  // an earlier stage failed: no time spent on the rest
    } else {
      EXPECT_EQ(c.at("status"), "measured");
    }
  }
  ASSERT_EQ(m.at("ranked").size(), 1u);
  EXPECT_EQ(m.at("ranked")[0].at("modelled_rank"), 3 - fails);
  // A failed run leaves no key: the next call runs it again (and fails again), reusing the rest.
  const test::CommandResult again =
      test::run_command(tune("--measure 2 --measure-dir " + runs + " --measure-device-memory " + std::to_string((a + b) / 2)));
  ASSERT_EQ(again.status, 0) << again.output;
  EXPECT_NE(again.output.find("1 runs started, 3 reused, 1 failed"), std::string::npos) << again.output;
  EXPECT_NE(again.output.find("FAILED: stage 0 (rank 0): exit status 1"), std::string::npos) << again.output;

  // A time limit: every run killed, reported, nothing ranked, the tuner itself fine.
  const nlohmann::json t = tune_json("--measure 1 --measure-timeout 0.001");
  EXPECT_EQ(t.at("measured").at("kept"), false);
  EXPECT_FALSE(fs::exists(t.at("measured").at("dir").get<std::string>())) << "the temporary run directories stay";
  ASSERT_EQ(t.at("measured").at("candidates").size(), 1u);
  EXPECT_EQ(t.at("measured").at("candidates")[0].at("status"), "failed");
  EXPECT_NE(t.at("measured").at("candidates")[0].at("reason").get<std::string>().find("timed out"), std::string::npos)
      << t.dump(1);
  EXPECT_TRUE(t.at("measured").at("ranked").empty());
}

// Recompute candidates (in place of offload in 2 MiB: selective, alone or beside a smaller offload, and block N
// without offload) are measured with their recompute: their children run quill train with Megatron's recompute
// flags, their run directories say so in their names, and the runs' allocator peaks are the plan's for those flags.
TEST_F(TuneMeasure, ARecomputeCandidateRunsWithItsRecomputeFlags) {
  const nlohmann::json modelled = tune_json("");
  const nlohmann::json& ranked = modelled.at("ranked");
  int kinds = 0;
  for (const std::string kind : {"selective ", "full block "}) {
    const auto it = std::find_if(ranked.begin(), ranked.end(), [&](const nlohmann::json& r) {
      return r.at("recompute").get<std::string>().rfind(kind, 0) == 0;
    });
    if (it == ranked.end()) continue;
    ++kinds;
    const int place = it->at("rank");
    const std::string recompute = it->at("recompute");  // "selective moe_act layernorm" or "full block N"
    SCOPED_TRACE(recompute);
    const bool selective = kind == "selective ";
    const std::string n = selective ? "" : recompute.substr(11);
    const double offload = it->at("offload_fraction");
    if (!selective) {
      EXPECT_EQ(offload, 0);
    }
    const nlohmann::json j = tune_json(fmt::format("--measure {} --measure-only {} --measure-dir {}/runs-r{}", place,
                                                   place, *dir_, kinds));
    const nlohmann::json& m = j.at("measured");
    ASSERT_EQ(m.at("candidates").size(), static_cast<size_t>(place));
    const nlohmann::json& c = m.at("candidates")[static_cast<size_t>(place - 1)];
    EXPECT_EQ(c.at("recompute"), recompute);
    EXPECT_EQ(c.at("status"), "measured") << c.dump(1);
    for (const nlohmann::json& run : c.at("runs")) {
      SCOPED_TRACE("stage " + std::to_string(run.at("stage").get<int>()));
      const std::vector<std::string> argv = run.at("argv");
      const std::vector<std::string> flags =
          selective ? std::vector<std::string>{"--recompute-granularity", "selective", "--recompute-modules", "moe_act",
                                               "layernorm"}
                    : std::vector<std::string>{"--recompute-granularity", "full", "--recompute-method", "block",
                                               "--recompute-num-layers", n};
      EXPECT_NE(std::search(argv.begin(), argv.end(), flags.begin(), flags.end()), argv.end()) << run.at("argv").dump();
      EXPECT_EQ(std::find(argv.begin(), argv.end(), "--optimizer-cpu-offload") == argv.end(), offload == 0);
      EXPECT_NE(run.at("dir").get<std::string>().find(selective ? "-rs" : "-rb" + n + "-"), std::string::npos)
          << run.at("dir");
      EXPECT_EQ(run.at("status"), "measured");
      EXPECT_EQ(run.at("measured").at("peak_device_bytes"), run.at("modelled").at("plan_allocator_peak_bytes"));
    }
    ASSERT_EQ(m.at("ranked").size(), 1u);
    EXPECT_EQ(m.at("ranked")[0].at("recompute"), recompute);
  }
  EXPECT_GE(kinds, 1) << "no recompute candidate in 2 MiB:\n" << modelled.dump(1);
}

}  // namespace
}  // namespace quill::tune
