// `quill train --simulate-rank R` (docs/simulate-rank.md) against the real run under mpirun: for
// TP2+SP, PP2 (a dense-only first stage) and TP2 x DP2, every rank R simulated alone records the
// same collectives as the real run's rank R (calls, payload and wire bytes, per step, group and
// operation) and the same CPU allocator peak (within 2%); the outputs say the loss is not meaningful;
// what cannot be simulated is refused naming the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "util/command.h"
#include "util/run_dir.h"

namespace {

namespace fs = std::filesystem;

std::string temp(const std::string& name) { return quill::test::fresh_temp_dir("sim", name); }
using quill::test::read_json;

std::string run_ok(const std::string& cmd) {
  const quill::test::CommandResult r = quill::test::run_command(cmd);
  EXPECT_EQ(r.status, 0) << cmd << "\n" << r.output;
  return r.output;
}

std::string mpirun(int ranks) { return std::string(QUILL_MPIEXEC) + " -np " + std::to_string(ranks) + " "; }

const std::string kQuill = QUILL_BINARY, kSrc = QUILL_SOURCE_DIR;
const std::string kConfig = kSrc + "/tests/fixtures/configs/tiny-tp4.json";

// The rows of world rank `rank` in a collectives.json.
nlohmann::json rank_rows(const nlohmann::json& file, int rank) {
  for (const nlohmann::json& r : file.at("ranks"))
    if (r.at("rank") == rank) return r.at("rows");
  ADD_FAILURE() << "rank " << rank << " missing from collectives.json";
  return nlohmann::json::array();
}

std::string train_flags(const std::string& rows) {
  return " train --config " + kConfig + " --rows " + rows + " --seed 5 --steps 2 --global-batch 4 --lr 1e-2 --quiet";
}

class SimulateRank : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rows_ = new std::string(temp("rows"));
    run_ok(kQuill + " data synth --conversations 300 --row-tokens 32 --max-rows 64 --out " + *rows_);
  }
  static void TearDownTestSuite() { delete rows_; }
  static std::string* rows_;
};
std::string* SimulateRank::rows_ = nullptr;

TEST_F(SimulateRank, EveryRankMatchesTheRealRunsBytesAndPeak) {
  int index = 0;
  for (const auto& [layout, ranks] : {std::pair<std::string, int>{"--tp 2 --sp", 2},
                                      {"--dp 2", 2},
                                      {"--pp 2 --pp-layers 1,3", 2},
                                      {"--tp 2 --dp 2", 4}}) {
    SCOPED_TRACE(layout);
    const std::string real = temp("real" + std::to_string(index));
    run_ok(mpirun(ranks) + kQuill + train_flags(*rows_) + " " + layout + " --out " + real + " </dev/null");
    const nlohmann::json real_bytes = read_json(real + "/collectives.json");
    const nlohmann::json real_summary = read_json(real + "/summary.json");
    EXPECT_TRUE(real_bytes.at("simulated_rank").is_null());
    ASSERT_EQ(real_bytes.at("ranks").size(), static_cast<size_t>(ranks));
    for (int r = 0; r < ranks; ++r) {
      SCOPED_TRACE("rank " + std::to_string(r));
      const std::string sim = temp("sim" + std::to_string(index) + "-" + std::to_string(r));
      run_ok(kQuill + train_flags(*rows_) + " " + layout + " --simulate-rank " + std::to_string(r) + " --out " + sim);
      const nlohmann::json sim_bytes = read_json(sim + "/collectives.json");
      EXPECT_EQ(sim_bytes.at("simulated_rank"), r);
      ASSERT_EQ(sim_bytes.at("ranks").size(), 1u);
      const nlohmann::json want = rank_rows(real_bytes, r), got = rank_rows(sim_bytes, r);
      bool in_steps = false;
      for (const nlohmann::json& row : want) in_steps |= row.at("step") == 1 && row.at("sent_bytes") > 0;
      EXPECT_TRUE(in_steps) << "the real run moved bytes in step 1";
      EXPECT_EQ(got, want);
      const double peak_real = real_summary.at("peak_device_bytes_per_rank")[r].get<double>();
      const double peak_sim = read_json(sim + "/summary.json").at("peak_device_bytes_per_rank")[r].get<double>();
      EXPECT_GT(peak_real, 0);
      EXPECT_NEAR(peak_sim, peak_real, 0.02 * peak_real);
    }
    // The peaks tell the ranks apart where they differ (the pipeline's stages; their collectives are
    // mirror images: each stage sends what the other receives).
    if (layout.rfind("--pp", 0) == 0) {
      EXPECT_NE(real_summary.at("peak_device_bytes_per_rank")[0], real_summary.at("peak_device_bytes_per_rank")[1]);
    }
    ++index;
  }
}

TEST_F(SimulateRank, OutputsSayTheLossIsNotMeaningful) {
  const std::string sim = temp("log");
  std::string flags = train_flags(*rows_);
  flags.erase(flags.find(" --quiet"));
  const std::string log = run_ok(kQuill + flags + " --pp 2 --simulate-rank 1 --out " + sim);
  EXPECT_NE(log.find("simulated rank 1 of 2: loss and grad norm not meaningful |"), std::string::npos) << log;
  EXPECT_NE(log.find("simulated rank 1: compute only, no communication time; loss not meaningful"), std::string::npos) << log;
  const nlohmann::json summary = read_json(sim + "/summary.json");
  EXPECT_EQ(summary.at("simulated_rank"), 1);
  EXPECT_EQ(summary.at("loss_meaningful"), false);
  // Per step, the last stage's recv from the first: one activation message per row, its size.
  const nlohmann::json rows = rank_rows(read_json(sim + "/collectives.json"), 1);
  int64_t received = 0;
  for (const nlohmann::json& row : rows)
    if (row.at("step") == 0 && row.at("group") == "pp") received += row.at("recv_bytes").get<int64_t>();
  EXPECT_EQ(received, 4 * 32 * 64 * 4) << "4 rows of 32 tokens x hidden 64, fp32";
}

TEST_F(SimulateRank, RefusesWhatItCannotSimulateNamingTheFlag) {
  const std::string flags = train_flags(*rows_);
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {Case{"--tp 2 --simulate-rank 2", "--simulate-rank 2: the layout (tp 2 cp 1 dp 1 pp 1 ep 1 etp 1) has 2 ranks (0..1)"},
                        Case{"--ep 2 --dp 2 --simulate-routing balanced", "--simulate-routing balanced: only with --simulate-rank"},
                        Case{"--ep 2 --dp 2 --simulate-rank 0 --simulate-routing nowhere.jsonl",
                             "--simulate-routing nowhere.jsonl: neither balanced nor a metrics.jsonl file"},
                        Case{"--tp 2 --simulate-rank 0 --save SAVE", "--simulate-rank with --save:"},
                        Case{"--tp 2 --simulate-rank 0 --save-hf", "--simulate-rank with --save-hf:"},
                        Case{"--tp 2 --simulate-rank -1", "--simulate-rank"}}) {
    SCOPED_TRACE(c.args);
    const std::string out = temp("refused");
    std::string args = c.args;
    if (const size_t at = args.find("SAVE"); at != std::string::npos) args.replace(at, 4, out + "/checkpoint");
    const quill::test::CommandResult r = quill::test::run_command(kQuill + flags + " " + args + " --out " + out);
    EXPECT_NE(r.status, 0);
    EXPECT_NE(r.output.find(c.message), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(out)) << "nothing written";
  }
  // Under a launcher of several ranks every rank stops.
  const quill::test::CommandResult r =
      quill::test::run_command(mpirun(2) + kQuill + flags + " --tp 2 --simulate-rank 1 --out " + temp("mpi") + " </dev/null");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--simulate-rank runs the layout's rank 1 alone in one process, but the launcher started 2"),
            std::string::npos)
      << r.output;
}

}  // namespace

namespace {

// tiny-tp4 cut to its first two layers (dense, then one MoE layer): the simulated rank's only MoE layer
// routes the real rank's inputs, so with --lr 0 every step's routing, and so every byte, is the real run's.
std::string one_moe_layer_config() {
  nlohmann::json c = read_json(kConfig);
  c["num_hidden_layers"] = 2;
  for (auto& [key, value] : c.items())
    if (value.is_array() && value.size() == 4) value = nlohmann::json(std::vector<nlohmann::json>(value.begin(), value.begin() + 2));
  const std::string path = temp("one-moe.json");
  std::ofstream(path) << c.dump();
  return path;
}

TEST_F(SimulateRank, ExpertParallelRanksMatchTheRealRunWithItsRecordedRouting) {
  const std::string flags = " train --config " + one_moe_layer_config() + " --rows " + *rows_ +
                            " --seed 5 --steps 2 --global-batch 4 --lr 0 --min-lr 0 --quiet --ep 2 --dp 2";
  const std::string real = temp("ep-real");
  run_ok("timeout 120 " + mpirun(2) + kQuill + flags + " --out " + real + " </dev/null");
  const nlohmann::json real_bytes = read_json(real + "/collectives.json");
  for (int r = 0; r < 2; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    const std::string sim = temp("ep-sim" + std::to_string(r));
    run_ok(kQuill + flags + " --simulate-rank " + std::to_string(r) + " --simulate-routing " + real +
           "/metrics.jsonl --out " + sim);
    const nlohmann::json want = rank_rows(real_bytes, r), got = rank_rows(read_json(sim + "/collectives.json"), r);
    bool exchanged = false;
    for (const nlohmann::json& row : want) exchanged |= row.at("group") == "ep" && row.at("step") == 1 && row.at("recv_bytes") > 0;
    EXPECT_TRUE(exchanged) << "the real run exchanged tokens in step 1";
    EXPECT_EQ(got, want);
  }
  // Balanced routing differs from the real routing (so the test above could fail), and runs on a model of
  // several MoE layers too.
  const std::string balanced = temp("ep-balanced");
  run_ok(kQuill + flags + " --simulate-rank 0 --out " + balanced);
  EXPECT_NE(rank_rows(read_json(balanced + "/collectives.json"), 0), rank_rows(real_bytes, 0));
  const std::string many = temp("ep-many");
  run_ok(kQuill + train_flags(*rows_) + " --ep 2 --dp 2 --simulate-rank 1 --out " + many);
  EXPECT_TRUE(fs::exists(many + "/projection.json"));
}

TEST_F(SimulateRank, ProjectionsOfOneAndOfEveryStage) {
  // A simulated run prints and writes its projection; quill project combines the stages.
  const std::string layout = " --pp 2 --pp-layers 1,3 --dp 2";
  std::vector<std::string> dirs;
  for (int r : {0, 2}) {  // stage 0 (ranks 0, 1), stage 1 (ranks 2, 3)
    const std::string sim = temp("proj" + std::to_string(r));
    const std::string out = run_ok(kQuill + train_flags(*rows_) + layout + " --simulate-rank " + std::to_string(r) + " --out " + sim);
    EXPECT_NE(out.find("projection of tp 1 cp 1 dp 2 pp 2 (1/3) ep 1 etp 1 (4 GPUs, 8 per node)"), std::string::npos) << out;
    EXPECT_NE(out.find("not measured: a like stage's figures"), std::string::npos) << out;
    const nlohmann::json p = read_json(sim + "/projection.json");
    EXPECT_EQ(p.at("format"), "quill-projection-1");
    EXPECT_GT(p.at("step_s").get<double>(), 0.0);
    EXPECT_TRUE(p.at("metrics").at("usd_per_million_tokens").is_null()) << "no price on the CPU";
    dirs.push_back(sim);
  }
  const std::string out = temp("proj-both");
  const std::string text = run_ok(kQuill + " project " + dirs[0] + " " + dirs[1] +
                                  " --global-batch 8 --price-per-gpu-hour 2 --nvlink-busbw-gbps 5 --out " + out);
  EXPECT_EQ(text.find("a like stage's figures"), std::string::npos) << text;
  EXPECT_NE(text.find("given on the command line: --nvlink-busbw-gbps 5"), std::string::npos) << text;
  const nlohmann::json p = read_json(out + "/projection.json");
  EXPECT_EQ(p.at("workload").at("micro_batches"), 4);
  EXPECT_EQ(p.at("stages").size(), 2u);
  EXPECT_FALSE(p.at("stages")[1].at("borrowed").get<bool>());
  EXPECT_DOUBLE_EQ(p.at("comm_model").at("intra_node_busbw_gbps").get<double>(), 5.0);
  // tokens/s/GPU and $ by the recipe's formulas over the projected step.
  const double tps = 8.0 * 32 / p.at("step_s").get<double>() / 4;
  EXPECT_NEAR(p.at("metrics").at("tokens_per_s_per_gpu").get<double>(), tps, 1e-9 * tps);
  EXPECT_NEAR(p.at("metrics").at("usd_per_million_tokens").get<double>(), 2.0 / (tps * 3600) * 1e6, 1e-9);
  // --overwrite removes a simulated run's projection with its other outputs.
  run_ok(kQuill + train_flags(*rows_) + " --overwrite --out " + dirs[0]);
  EXPECT_FALSE(fs::exists(dirs[0] + "/projection.json"));
  EXPECT_TRUE(fs::exists(dirs[0] + "/summary.json"));
  dirs[0] = temp("proj0-again");
  run_ok(kQuill + train_flags(*rows_) + layout + " --simulate-rank 0 --out " + dirs[0]);
  // Refusals: two runs of one stage; a real run's directory.
  quill::test::CommandResult r = quill::test::run_command(kQuill + " project " + dirs[0] + " " + dirs[0]);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("both measure stage 0"), std::string::npos) << r.output;
  const std::string real = temp("proj-real");
  run_ok(mpirun(2) + kQuill + train_flags(*rows_) + " --dp 2 --out " + real + " </dev/null");
  r = quill::test::run_command(kQuill + " project " + real);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("a real run's collectives (simulated_rank null)"), std::string::npos) << r.output;
}

TEST_F(SimulateRank, TheLoopbacksCopiesAreTimedAndTakenOffTheComputeItProjects) {
  // TP2+SP: every layer all-gathers and reduce-scatters through the loopback, whose copies stand in for
  // collectives the projection models; they are timed per step and phase and taken off the compute.
  const std::string sim = temp("loopback-time");
  run_ok(kQuill + " train --config " + kConfig + " --rows " + *rows_ +
         " --seed 5 --steps 3 --global-batch 4 --lr 1e-2 --quiet --tp 2 --sp --simulate-rank 1 --out " + sim);
  const nlohmann::json c = read_json(sim + "/collectives.json"), s = read_json(sim + "/summary.json");
  ASSERT_TRUE(c.at("loopback_copy_s").is_array());
  std::map<int64_t, double> passes_copies;
  for (const nlohmann::json& t : c.at("loopback_copy_s"))
    if (t.at("phase") == "passes") passes_copies[t.at("step").get<int64_t>()] += t.at("seconds").get<double>();
  std::vector<double> compute;
  for (const nlohmann::json& st : s.at("per_step")) {
    const int64_t step = st.at("step");
    ASSERT_TRUE(passes_copies.count(step)) << "step " << step << " has no passes' loopback time";
    EXPECT_GT(passes_copies[step], 0.0);
    EXPECT_LT(passes_copies[step], st.at("passes_time_s").get<double>());
    compute.push_back(st.at("passes_time_s").get<double>() - passes_copies[step]);
  }
  ASSERT_EQ(compute.size(), 3u);
  std::sort(compute.begin(), compute.end());
  const nlohmann::json p = read_json(sim + "/projection.json");
  const nlohmann::json& stage = p.at("stages")[0];
  EXPECT_NEAR(stage.at("compute_per_micro_batch_s").get<double>(), compute[1] / 4, 1e-12);
  EXPECT_GT(stage.at("loopback_per_micro_batch_s").get<double>(), 0.0);
  // A real run has no loopback.
  const std::string real = temp("loopback-real");
  run_ok(mpirun(2) + kQuill + train_flags(*rows_) + " --tp 2 --sp --out " + real + " </dev/null");
  EXPECT_TRUE(read_json(real + "/collectives.json").at("loopback_copy_s").is_null());
  // A damaged loopback_copy_s is refused naming the file and what is wrong; removed, the run reads as an older
  // quill's (nothing taken off, and the projection says so).
  const std::string damaged = temp("loopback-damaged");
  fs::copy(sim, damaged);
  const auto project_with = [&](const nlohmann::json& loopback) {
    nlohmann::json file = c;
    if (loopback.is_discarded()) file.erase("loopback_copy_s");
    else file["loopback_copy_s"] = loopback;
    std::ofstream(damaged + "/collectives.json") << file.dump(1);
    return quill::test::run_command(kQuill + " project " + damaged);
  };
  quill::test::CommandResult r = project_with(nlohmann::json::object());
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("collectives.json: loopback_copy_s is {}, not an array"), std::string::npos) << r.output;
  r = project_with(nlohmann::json::array({{{"step", 1}, {"phase", "passes"}, {"seconds", -1.0}}}));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("has seconds -1"), std::string::npos) << r.output;
  r = project_with(nlohmann::json::array({{{"step", 1}, {"phase", "passes"}, {"seconds", 1e6}}}));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("gives step 1's passes 1000000 s of copies"), std::string::npos) << r.output;
  r = project_with(nlohmann::json::array({{{"step", 1}, {"phase", "passes"}}}));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("collectives.json or"), std::string::npos) << r.output;
  r = project_with(nlohmann::json(nlohmann::json::value_t::discarded));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("rank 1 not timed (a run of an older quill: its copies stay in)"), std::string::npos)
      << r.output;
}

TEST_F(SimulateRank, ProjectRefusesStagesOfDifferentModelsOrRecompute) {
  // Issue 44: quill project took stage runs of two different models (or a stage run with activation
  // recompute beside one without) and projected them as one layout.
  const std::string layout = " --pp 2 --pp-layers 1,3 --dp 2";
  const std::string stage0 = temp("mixed-stage0"), stage1 = temp("mixed-stage1"), other_model = temp("mixed-other-model"),
                    recomputed = temp("mixed-recomputed");
  run_ok(kQuill + train_flags(*rows_) + layout + " --simulate-rank 0 --out " + stage0);
  run_ok(kQuill + train_flags(*rows_) + layout + " --simulate-rank 2 --out " + stage1);
  std::string tiny = train_flags(*rows_);
  tiny.replace(tiny.find(kConfig), kConfig.size(), kSrc + "/configs/tiny.json");
  run_ok(kQuill + tiny + layout + " --simulate-rank 2 --out " + other_model);
  run_ok(kQuill + train_flags(*rows_) + layout +
         " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --simulate-rank 2 --out " +
         recomputed);
  run_ok(kQuill + " project " + stage0 + " " + stage1);  // one model: accepted
  quill::test::CommandResult r = quill::test::run_command(kQuill + " project " + stage0 + " " + other_model);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("quill project: the runs differ in summary.json active_params (the model): "), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find(" in " + stage0 + ", "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(" in " + other_model + "; give the stages of one model, layout and workload"), std::string::npos)
      << r.output;
  r = quill::test::run_command(kQuill + " project " + stage0 + " " + recomputed);
  EXPECT_EQ(r.status, 1) << r.output;
  EXPECT_NE(r.output.find("quill project: the runs differ in summary.json recompute: "), std::string::npos) << r.output;
}

}  // namespace

namespace {

// The per-step losses and gradient norms of a run's metrics.jsonl, as written.
std::vector<std::string> loss_lines(const std::string& dir) {
  std::vector<std::string> out;
  std::ifstream in(dir + "/metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("loss")) out.push_back(j.at("loss").dump() + " " + j.value("grad_norm", nlohmann::json()).dump());
  }
  return out;
}

}  // namespace

TEST_F(SimulateRank, TimedStandInsKeepTheBitsAndAddTheModelledTime) {
  const std::string layout = " --tp 2 --sp --dp 2";
  const std::string plain = temp("untimed"), timed = temp("timed");
  run_ok(kQuill + train_flags(*rows_) + layout + " --simulate-rank 1 --out " + plain);
  // A slow modelled link (1e6 bytes/s inside the node, no latency) makes the stand-ins' time dominate the CPU step.
  const std::string out = run_ok(kQuill + train_flags(*rows_) + layout +
                                 " --simulate-rank 1 --simulate-comm-time --nvlink-busbw-gbps 0.001 --nvlink-latency-us 0"
                                 " --out " + timed);
  // The run projects itself from its measured passes, on the model its stand-ins ran with.
  EXPECT_NE(out.find("with none overlapped"), std::string::npos) << out;
  EXPECT_NE(out.find("hidden shares from " + timed + "/collectives.json standin_overlap"), std::string::npos) << out;
  const nlohmann::json projection = read_json(timed + "/projection.json");
  EXPECT_EQ(projection.at("timed_standins"), true);
  EXPECT_EQ(projection.at("comm_model").at("intra_node_busbw_gbps"), 0.001);
  EXPECT_GE(projection.at("none_overlapped_step_s").get<double>(), projection.at("step_s").get<double>() * 0.999);
  EXPECT_EQ(read_json(timed + "/collectives.json").at("standin_comm_model").at("intra_node_latency_us"), 0);
  EXPECT_TRUE(read_json(plain + "/collectives.json").at("standin_comm_model").is_null());
  // The host clock's record: per group its time on the queues, of it the part beside the rank's own work.
  const nlohmann::json overlap = read_json(timed + "/collectives.json").at("standin_overlap");
  ASSERT_TRUE(overlap.contains("tp")) << overlap.dump();
  for (const auto& [group, t] : overlap.items()) {
    EXPECT_GT(t.at("comm_s").get<double>(), 0) << group;
    EXPECT_GE(t.at("hidden_s").get<double>(), 0) << group;
    EXPECT_LE(t.at("hidden_s").get<double>(), t.at("comm_s").get<double>() * (1 + 1e-9)) << group;
  }
  // With the tensor-parallel overlap the reduce-scatters started before the weight gradients run beside them:
  // the record and the projection say that part of tp's time was hidden.
  const std::string overlapped = temp("timed-overlap");
  run_ok(kQuill + train_flags(*rows_) + layout +
         " --simulate-rank 1 --simulate-comm-time --nvlink-busbw-gbps 0.001 --nvlink-latency-us 0 --tp-comm-overlap"
         " --out " + overlapped);
  const nlohmann::json tp = read_json(overlapped + "/collectives.json").at("standin_overlap").at("tp");
  EXPECT_GT(tp.at("hidden_s").get<double>(), 0) << tp.dump();
  EXPECT_GT(read_json(overlapped + "/projection.json").at("hidden_comm_s").get<double>(), 0);
  // The same bits and the same collectives.
  EXPECT_EQ(loss_lines(timed), loss_lines(plain));
  EXPECT_FALSE(loss_lines(plain).empty());
  EXPECT_EQ(rank_rows(read_json(timed + "/collectives.json"), 1), rank_rows(read_json(plain + "/collectives.json"), 1));
  const nlohmann::json summary = read_json(timed + "/summary.json");
  EXPECT_EQ(summary.at("simulated_comm_time"), true);
  EXPECT_EQ(read_json(plain + "/summary.json").at("simulated_comm_time"), false);
  // Each step lasts at least its collectives' wire bytes at 1e6 bytes/s (one queue: no exchange of its own here).
  for (const nlohmann::json& st : summary.at("per_step")) {
    const int64_t step = st.at("step");
    double modelled = 0;
    for (const nlohmann::json& row : rank_rows(read_json(timed + "/collectives.json"), 1))
      if (row.at("step") == step && row.at("group_size").get<int>() > 1)
        modelled += static_cast<double>(std::max(row.at("sent_bytes").get<int64_t>(), row.at("recv_bytes").get<int64_t>())) / 1e6;
    EXPECT_GT(modelled, 0.05) << "step " << step;
    EXPECT_GE(st.at("step_time_s").get<double>(), modelled) << "step " << step;
  }
  // quill project lays it out on the model it ran with; another model's flags, or an untimed run beside it,
  // are refused naming what differs; without --simulate-rank the flag is refused.
  quill::test::CommandResult r = quill::test::run_command(kQuill + " project " + timed);
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("hidden per group"), std::string::npos) << r.output;
  r = quill::test::run_command(kQuill + " project " + timed + " --nvlink-busbw-gbps 370");
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("ran with timed stand-ins under its own communication model"), std::string::npos) << r.output;
  r = quill::test::run_command(kQuill + " project " + timed + " --nvlink-busbw-gbps 0.001 --nvlink-latency-us 0");
  EXPECT_EQ(r.status, 0) << r.output;
  r = quill::test::run_command(kQuill + " project " + plain + " " + timed);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("simulated_comm_time (timed stand-ins)"), std::string::npos) << r.output;
  r = quill::test::run_command(kQuill + train_flags(*rows_) + " --simulate-comm-time --out " + temp("timed-real"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--simulate-comm-time: only with --simulate-rank"), std::string::npos) << r.output;
  r = quill::test::run_command(kQuill + train_flags(*rows_) + layout + " --simulate-rank 1 --simulate-comm-sms 8 --out " +
                               temp("sms-alone"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--simulate-comm-sms 8: only with --simulate-comm-time"), std::string::npos) << r.output;
}
