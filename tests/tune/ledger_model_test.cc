// The modelled collective ledger (tune/ledger_model.h) against `quill train --simulate-rank R` on the
// CPU (whose bytes tests/cli/simulate_rank_test.cc checks against real mpirun runs): every row of every
// step equal, calls, payload, sent and received bytes, for TP (with and without SP, 2 and 4 ranks), PP
// (uneven), DP, EP x DP, TP SP x EP x DP, TP x PP x DP x EP of tests/fixtures/configs/tiny-tp4.json, and
// of configs/seed-shape (42 layers) TP2 SP PP2 EP2 DP2 and the seed's own 32-rank layout (first, middle
// and last stage). Under expert parallelism the rows a rank's router sends to its own experts come
// from the simulated run's metrics.jsonl (its own counts); the peers' are the balanced model's.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "model/config.h"
#include "model/params.h"
#include "parallel/grid.h"
#include "parallel/layout.h"
#include "tune/ledger_model.h"
#include "util/command.h"
#include "util/run_dir.h"

namespace quill::tune {
namespace {

namespace fs = std::filesystem;

const std::string kQuill = QUILL_BINARY, kSrc = QUILL_SOURCE_DIR;

std::string temp(const std::string& name) { return test::fresh_temp_dir("ledger", name); }
using test::read_json;

std::string describe(const CollectiveRow& r) {
  std::ostringstream o;
  o << "step " << r.step << " " << r.phase << " " << r.group << "(" << r.group_size << ") " << r.op << " calls "
    << r.calls << " payload " << r.payload_bytes << " sent " << r.sent_bytes << " recv " << r.recv_bytes;
  return o.str();
}

struct Case {
  std::string config;  // relative to the source tree
  std::string flags;
  LayoutSpec spec;
  std::vector<int> ranks;
  RecomputeOptions recompute = {};  // and its flags in `flags`
};

LayoutSpec spec(int tp, bool sp, int pp, int dp, int ep, std::vector<int64_t> layers = {}) {
  LayoutSpec s;
  s.tp = tp, s.sequence_parallel = sp, s.pp = pp, s.dp = dp, s.ep = ep, s.pp_layers = std::move(layers);
  return s;
}

class LedgerModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    rows_ = new std::string(temp("rows"));
    const test::CommandResult r =
        test::run_command(kQuill + " data synth --conversations 300 --row-tokens 32 --max-rows 64 --out " + *rows_);
    ASSERT_EQ(r.status, 0) << r.output;
  }
  static void TearDownTestSuite() {
    fs::remove_all(*rows_);
    delete rows_;
  }
  static std::string* rows_;

  // Simulates `rank` for 2 steps of 4 rows and compares each step's rows with the model's.
  void check(const Case& c, int rank) {
    SCOPED_TRACE(c.flags + " rank " + std::to_string(rank));
    const std::string out = temp("sim");
    const std::string cmd = kQuill + " train --config " + kSrc + "/" + c.config + " --rows " + *rows_ +
                            " --seed 5 --steps 2 --global-batch 4 --lr 1e-2 --quiet " + c.flags + " --simulate-rank " +
                            std::to_string(rank) + " --out " + out;
    const test::CommandResult r = test::run_command(cmd);
    ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
    const nlohmann::json file = read_json(out + "/collectives.json");
    const nlohmann::json& got_rows = file.at("ranks")[0].at("rows");
    const InklingConfig config = load_inkling_config(kSrc + "/" + c.config);
    // This rank's own routing: its counts of the step (the loopback's world sum leaves them its own).
    std::vector<int64_t> own_per_step;
    {
      std::ifstream metrics(out + "/metrics.jsonl");
      const Grid grid(c.spec.world(), c.spec);
      const GridCoords at = grid.coords(rank);
      const std::vector<int64_t> stages = resolve_stage_layers(c.spec, config.num_layers);
      int64_t first = 0;
      for (int s = 0; s < at.pp; ++s) first += stages[static_cast<size_t>(s)];
      const int64_t end = first + stages[static_cast<size_t>(at.pp)];
      const int64_t El = config.n_routed_experts / c.spec.ep;
      for (std::string line; std::getline(metrics, line);) {
        const nlohmann::json m = nlohmann::json::parse(line);
        int64_t own = 0, moe = 0;
        for (int64_t i = 0; i < config.num_layers; ++i) {
          if (!config.is_moe(i)) continue;
          if (i >= first && i < end)
            for (int64_t e = at.ep * El; e < (at.ep + 1) * El; ++e) own += m.at("expert_tokens")[moe][e].get<int64_t>();
          ++moe;
        }
        own_per_step.push_back(own);
      }
    }
    ASSERT_EQ(own_per_step.size(), 2u);
    LedgerWorkload w;
    w.row_tokens = 32;
    w.global_batch = 4;
    w.device = Device::CPU;
    w.freeze = miles_frozen_patterns();  // quill train's default --freeze-preset
    w.recompute = c.recompute;
    for (int64_t step = 0; step < 2; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      std::vector<CollectiveRow> want;
      for (const nlohmann::json& j : got_rows) {
        if (j.at("step") != step) continue;
        CollectiveRow row;
        row.step = j.at("step"), row.phase = j.at("phase"), row.group = j.at("group"), row.group_size = j.at("group_size");
        row.op = j.at("op"), row.calls = j.at("calls"), row.payload_bytes = j.at("payload_bytes");
        row.sent_bytes = j.at("sent_bytes"), row.recv_bytes = j.at("recv_bytes");
        want.push_back(row);
      }
      ASSERT_FALSE(want.empty());
      const std::vector<CollectiveRow> got =
          modelled_ledger(config, c.spec, rank, w, step, c.spec.ep > 1 ? own_per_step[static_cast<size_t>(step)] : -1);
      std::string a, b;
      for (const CollectiveRow& x : want) a += describe(x) + "\n";
      for (const CollectiveRow& x : got) b += describe(x) + "\n";
      EXPECT_EQ(b, a) << "modelled (left) against simulated (right)";
    }
    fs::remove_all(out);
  }
};
std::string* LedgerModel::rows_ = nullptr;

const char* const kTiny = "tests/fixtures/configs/tiny-tp4.json";
const char* const kSeedShape = "configs/seed-shape/config.json";

TEST_F(LedgerModel, TensorAndSequenceParallelRowsEqualTheSimulatedRanks) {
  for (const Case& c : {Case{kTiny, "--tp 2 --sp", spec(2, true, 1, 1, 1), {0, 1}},
                        Case{kTiny, "--tp 2", spec(2, false, 1, 1, 1), {1}},
                        Case{kTiny, "--tp 4 --sp", spec(4, true, 1, 1, 1), {2}}})
    for (int r : c.ranks) check(c, r);
}

TEST_F(LedgerModel, PipelineAndDataParallelRowsEqualTheSimulatedRanks) {
  for (const Case& c : {Case{kTiny, "--pp 2 --pp-layers 1,3", spec(1, false, 2, 1, 1, {1, 3}), {0, 1}},
                        Case{kTiny, "--dp 2", spec(1, false, 1, 2, 1), {1}}})
    for (int r : c.ranks) check(c, r);
}

TEST_F(LedgerModel, ExpertParallelRowsEqualTheSimulatedRanksWithTheirOwnRouting) {
  for (const Case& c : {Case{kTiny, "--ep 2 --dp 2 --simulate-routing balanced", spec(1, false, 1, 2, 2), {0, 1}},
                        Case{kTiny, "--tp 2 --sp --ep 2 --dp 2", spec(2, true, 1, 2, 2), {3}},
                        Case{kTiny, "--tp 2 --pp 2 --dp 2 --ep 2", spec(2, false, 2, 2, 2), {0, 7}}})
    for (int r : c.ranks) check(c, r);
}

// Recompute runs a recomputed layer's forward collectives again before its backward: the TP gathers and
// reductions, the halos, the shared experts' gammas, the expert count exchange and the token exchange.
TEST_F(LedgerModel, RecomputedLayersRepeatTheirForwardCollectives) {
  const std::string uniform1 = " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1";
  const std::string block2 = " --recompute-granularity full --recompute-method block --recompute-num-layers 2";
  for (const Case& c :
       {Case{kTiny, "--tp 2 --sp" + uniform1, spec(2, true, 1, 1, 1), {0}, parse_recompute("full", "uniform", 1)},
        Case{kTiny, "--tp 2" + block2, spec(2, false, 1, 1, 1), {1}, parse_recompute("full", "block", 2)},
        Case{kTiny, "--ep 2 --dp 2 --simulate-routing balanced" + uniform1, spec(1, false, 1, 2, 2), {0},
             parse_recompute("full", "uniform", 1)}})
    for (int rank : c.ranks) check(c, rank);
}

// Selective recompute's layernorm gathers the attention's and the MLP's inputs again in each layer's backward
// under sequence parallelism (nothing more without it); moe_act adds no collective.
TEST_F(LedgerModel, SelectiveRecomputeGathersTheNormsOutputsAgain) {
  const std::string both = " --recompute-granularity selective --recompute-modules moe_act layernorm";
  for (const Case& c :
       {Case{kTiny, "--tp 2 --sp" + both, spec(2, true, 1, 1, 1), {0}, parse_recompute("selective", "", 1, {"moe_act", "layernorm"})},
        Case{kTiny, "--tp 2" + both, spec(2, false, 1, 1, 1), {1}, parse_recompute("selective", "", 1, {"moe_act", "layernorm"})}})
    for (int rank : c.ranks) check(c, rank);
}

TEST_F(LedgerModel, SeedShapedLayoutsEqualTheSimulatedRanks) {
  check(Case{kSeedShape, "--tp 2 --sp --pp 2 --ep 2 --dp 2", spec(2, true, 2, 2, 2), {}}, 7);
  // The seed's own layout on 32 ranks: the first, a middle and the last stage.
  const Case seed{kSeedShape, "--tp 4 --sp --pp 4 --pp-layers 12,10,10,10 --ep 8 --dp 2",
                  spec(4, true, 4, 2, 8, {12, 10, 10, 10}), {0, 13, 31}};
  for (int r : seed.ranks) check(seed, r);
}

// What the model says without the recorded routing: balanced for this rank too, the count exchange and
// the payload of the dispatch independent of routing.
TEST(LedgerModelBalanced, DispatchPayloadIsEveryRoutedRowAndOwnRowsAreTheBalancedShare) {
  const InklingConfig config = load_inkling_config(kSrc + "/" + kTiny);
  LedgerWorkload w;
  w.row_tokens = 32, w.global_batch = 4, w.device = Device::CPU;
  const LayoutSpec s = spec(1, false, 1, 2, 2);
  // 3 MoE layers x 2 micro-batches x (32 x top-2 = 64 rows, 8 per expert): 4 experts' 32 rows each.
  EXPECT_EQ(balanced_own_expert_rows(config, s, 0, w), 3 * 2 * 32);
  const std::vector<CollectiveRow> rows = modelled_ledger(config, s, 0, w);
  const auto ep = std::find_if(rows.begin(), rows.end(), [](const CollectiveRow& r) { return r.group == "ep"; });
  ASSERT_NE(ep, rows.end());
  EXPECT_EQ(ep->calls, 3 * 2 * 5);  // per layer and micro-batch: counts, dispatch, combine, and both adjoints
  const int64_t row = 64 * 4;       // hidden 64, fp32
  EXPECT_EQ(ep->payload_bytes, 3 * 2 * 8 * 8 + 4 * 3 * 2 * 64 * row);
  EXPECT_EQ(ep->sent_bytes, ep->recv_bytes);
  EXPECT_EQ(ep->sent_bytes, 3 * 2 * 4 * 8 + 4 * 3 * 2 * 32 * row);
  // The same on a GPU: bf16 rows.
  w.device = Device::CUDA;
  const std::vector<CollectiveRow> gpu = modelled_ledger(config, s, 0, w);
  const auto ep_gpu = std::find_if(gpu.begin(), gpu.end(), [](const CollectiveRow& r) { return r.group == "ep"; });
  EXPECT_EQ(ep_gpu->sent_bytes, 3 * 2 * 4 * 8 + 4 * 3 * 2 * 32 * 64 * 2);
}

}  // namespace
}  // namespace quill::tune
