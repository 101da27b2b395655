// `quill train --simulate-rank R` (docs/simulate-rank.md) against the real run under mpirun: for
// TP2+SP, PP2 (a dense-only first stage) and TP2 x DP2, every rank R simulated alone records the
// same collectives as the real run's rank R (calls, payload and wire bytes, per step, group and
// operation) and the same CPU allocator peak (within 2%); the outputs say the loss is not meaningful;
// what cannot be simulated is refused naming the flag.
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
  std::string d = (fs::temp_directory_path() / ("quill-sim-" + std::to_string(::getpid()) + "-" + name)).string();
  fs::remove_all(d);
  return d;
}

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return nlohmann::json::parse(in);
}

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
                                      {"--pp 2 --pp-layers 1,3", 2},
                                      {"--tp 2 --dp 2", 4}}) {
    SCOPED_TRACE(layout);
    const std::string real = temp("real" + std::to_string(index));
    run_ok(mpirun(ranks) + kQuill + train_flags(*rows_) + " " + layout + " --out " + real);
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
    if (layout.rfind("--pp", 0) == 0)
      EXPECT_NE(real_summary.at("peak_device_bytes_per_rank")[0], real_summary.at("peak_device_bytes_per_rank")[1]);
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
                        Case{"--simulate-rank 0 --ep 2", "--simulate-rank with --expert-model-parallel-size 2"},
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
      quill::test::run_command(mpirun(2) + kQuill + flags + " --tp 2 --simulate-rank 1 --out " + temp("mpi"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--simulate-rank runs the layout's rank 1 alone in one process, but the launcher started 2"),
            std::string::npos)
      << r.output;
}

}  // namespace
