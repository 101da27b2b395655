// Expert parallelism on the CPU under mpirun: the single-rank command line plus --ep (carved from the
// ranks of --tp x --dp, Megatron's expert grid), against one rank on the same model and rows. Every
// step's loss and gradient norm within 1e-5 relative, the same per-expert counts (each rank reports
// its own tokens' routing over all experts, summed over the world), and the fp32 weights after 3
// steps within 1e-5. Expert-parallel ranks hold E/ep routed experts each; their rows travel by the
// all-to-all dispatcher (parallel/expert_dispatch.h). The model is tests/fixtures/configs/
// tiny-tp4.json: 8 routed experts (2 per rank under EP4), 8 query / 4 kv heads for TP.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "io/safetensors.h"
#include "model/config.h"
#include "train/train_checkpoint.h"
#include "util/command.h"
#include "util/run_dir.h"
#include "util/watchdog_check.h"

namespace {

namespace fs = std::filesystem;

std::string scratch_dir(const std::string& name) { return quill::test::fresh_temp_dir("ep", name); }

using quill::test::read_metrics;

void expect_runs(const std::string& cmd) {
  const quill::test::CommandResult r = quill::test::run_command(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
}

std::string under_mpirun(int ranks) { return quill::test::mpirun_command(ranks); }

using quill::test::relative_l2_f32;

const std::string kQuill = QUILL_BINARY, kSrc = QUILL_SOURCE_DIR;
const std::string kConfig = kSrc + "/tests/fixtures/configs/tiny-tp4.json";

struct EpLayout {
  std::string flags;
  int ranks;
};

TEST(ExpertParallel, LayoutsEqualOneRankEveryStep) {
  const std::string rows = scratch_dir("rows");
  expect_runs(kQuill + " data synth --conversations 300 --row-tokens 32 --max-rows 64 --out " + rows);
  const std::string train = " train --config " + kConfig + " --rows " + rows +
                            " --seed 6 --steps 3 --global-batch 4 --lr 1e-2 --weight-decay 0.1 --quiet";
  const std::string one = scratch_dir("one");
  expect_runs(kQuill + train + " --out " + one + " --save " + one + "/checkpoint");
  const auto ref = read_metrics(one);
  ASSERT_EQ(ref.size(), 3u);
  std::map<std::string, quill::Tensor> ref_weights;
  for (auto& [name, t] : quill::checkpoint_values(one + "/checkpoint")) ref_weights[name] = t;

  const std::vector<EpLayout> layouts = {
      {"--dp 2 --ep 2", 2},                         // EP2 (edp 1)
      {"--dp 4 --ep 4", 4},                         // EP4: two experts per rank
      {"--dp 4 --ep 2", 4},                         // EP2 x DP2: expert gradients reduced over edp 2
      {"--tp 2 --sp --ep 2", 2},                    // EP2 over the tensor-parallel ranks' sequence chunks
      {"--tp 2 --sp --dp 2 --ep 2", 4},             // TP2+SP, EP2 (edp 2)
      {"--tp 2 --dp 2 --ep 4", 4},                  // TP2 x DP2 with EP4 (without SP)
      {"--dp 2 --pp 2 --pp-layers 2,2 --ep 2", 4},  // EP2 x PP2: each stage's MoE layers exchange
  };
  int index = 0;
  for (const EpLayout& layout : layouts) {
    SCOPED_TRACE(layout.flags);
    const std::string out = scratch_dir("layout" + std::to_string(index++));
    expect_runs(under_mpirun(layout.ranks) + kQuill + train + " " + layout.flags + " --out " + out + " --save " + out +
                "/checkpoint");
    quill::test::expect_steps_match(read_metrics(out), ref);
    quill::test::expect_weights_match(out + "/checkpoint", ref_weights);
  }
}

// --moe-shared-expert-overlap moves the shared experts (2 in this config) into the token exchange's
// flight, forward and backward: the same arithmetic in another order of independent work, so the
// losses, gradient norms and fp32 weights equal the run without it bit for bit (TP2+SP as well: the
// shared experts' tensor-parallel collectives then run while the expert-parallel exchange is pending).
TEST(ExpertParallel, SharedExpertOverlapChangesNoBit) {
  const std::string rows = scratch_dir("rows-overlap");
  expect_runs(kQuill + " data synth --conversations 300 --row-tokens 32 --max-rows 64 --out " + rows);
  const std::string train = " train --config " + kConfig + " --rows " + rows +
                            " --seed 9 --steps 3 --global-batch 4 --lr 1e-2 --quiet";
  for (const std::string& layout : {std::string("--dp 2 --ep 2"), std::string("--tp 2 --sp --dp 2 --ep 2")}) {
    SCOPED_TRACE(layout);
    const int ranks = layout.find("--tp 2") != std::string::npos ? 4 : 2;
    const std::string plain = scratch_dir("overlap-off"), overlap = scratch_dir("overlap-on");
    expect_runs(under_mpirun(ranks) + kQuill + train + " " + layout + " --out " + plain + " --save " + plain + "/checkpoint");
    expect_runs(under_mpirun(ranks) + kQuill + train + " " + layout + " --moe-shared-expert-overlap --out " + overlap +
                " --save " + overlap + "/checkpoint");
    quill::test::expect_runs_bit_identical(plain, overlap, 3);
  }
}

// A Hugging Face checkpoint loads into EP2 x DP2 (each rank reads only its experts) and the export
// gathers every expert back: with --lr 0 the files must equal one rank's byte for byte.
TEST(ExpertParallel, ExportUnderExpertParallelismIsByteIdentical) {
  const std::string rows = scratch_dir("rows-export");
  expect_runs(kQuill + " data synth --conversations 200 --row-tokens 32 --max-rows 16 --out " + rows);
  const std::string init = scratch_dir("init");
  expect_runs(kQuill + " train --config " + kConfig + " --rows " + rows +
              " --seed 9 --steps 2 --global-batch 4 --lr 1e-2 --quiet --save-hf --out " + init);
  const std::string train =
      " train --init " + init + "/hf --rows " + rows + " --steps 1 --global-batch 4 --lr 0 --quiet --save-hf";
  const std::string one = scratch_dir("export-one"), ep = scratch_dir("export-ep2");
  expect_runs(kQuill + train + " --out " + one);
  expect_runs(under_mpirun(4) + kQuill + train + " --dp 4 --ep 2 --out " + ep);
  const double loss_one = read_metrics(one)[0]["loss"].get<double>(), loss_ep = read_metrics(ep)[0]["loss"].get<double>();
  EXPECT_NEAR(loss_ep, loss_one, 1e-6 * loss_one) << "the same weights loaded into EP2";
  quill::test::expect_same_tensor_bytes(one + "/hf/model.safetensors", ep + "/hf/model.safetensors");
}

// EP2 stopped after 2 steps and resumed equals the uninterrupted run bit for bit; its checkpoint
// (keyed by global element ranges) also resumes without expert parallelism (DP2), within rounding.
TEST(ExpertParallel, ResumeIsBitIdenticalAndCrossesLayouts) {
  const std::string rows = scratch_dir("rows-resume");
  expect_runs(kQuill + " data synth --conversations 200 --row-tokens 32 --max-rows 32 --out " + rows);
  const std::string mpi = under_mpirun(2) + kQuill;
  const std::string train = " train --config " + kConfig + " --rows " + rows +
                            " --seed 4 --steps 4 --global-batch 2 --lr 1e-2 --quiet --dp 2";
  const std::string whole = scratch_dir("whole"), parts = scratch_dir("parts"), other = scratch_dir("other");
  expect_runs(mpi + train + " --ep 2 --out " + whole);
  expect_runs(mpi + train + " --ep 2 --stop-after 2 --out " + parts + " --save " + parts + "/checkpoint");
  fs::copy(parts, other, fs::copy_options::recursive);
  expect_runs(mpi + train + " --ep 2 --resume " + parts + "/checkpoint --out " + parts + " --save " + parts +
              "/checkpoint");
  expect_runs(mpi + train + " --resume " + other + "/checkpoint --out " + other);
  const auto a = read_metrics(whole), b = read_metrics(parts), c = read_metrics(other);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), a.size());
  ASSERT_EQ(c.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << i;
    EXPECT_EQ(a[i]["grad_norm"], b[i]["grad_norm"]) << i;
    for (const char* key : {"loss", "grad_norm"})
      EXPECT_NEAR(c[i][key].get<double>(), a[i][key].get<double>(), 1e-5 * std::fabs(a[i][key].get<double>()))
          << "resumed under DP2 without EP: " << key << " step " << i;
  }
}

// Layouts whose experts or ranks do not divide are refused before any rank starts or anything
// loads, naming the flag (the checks need no launcher).
TEST(ExpertParallel, LayoutsThatDoNotDivideAreRefused) {
  const std::string rows = scratch_dir("rows-bad");
  expect_runs(kQuill + " data synth --conversations 100 --row-tokens 32 --max-rows 8 --out " + rows);
  const std::string base = kQuill + " train --config " + kConfig + " --rows " + rows + " --steps 1 --global-batch 6 --quiet";
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--dp 3 --ep 3", "--expert-model-parallel-size 3 does not divide the 8 routed experts of "
                             "model.llm.layers.1.mlp.experts.w13_weight"},
           {"--dp 2 --ep 4", "--expert-model-parallel-size 4 x --expert-tensor-parallel-size 1 = 4 does not divide the 2 "
                             "ranks of a pipeline stage"},
           {"--tp 2 --ep 2 --etp 2", "--expert-tensor-parallel-size 2: quill builds expert tensor parallelism 1"}}) {
    const std::string out = scratch_dir("bad");
    const quill::test::CommandResult r = quill::test::run_command(base + " " + flags + " --out " + out);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << ": " << r.output;
    EXPECT_FALSE(fs::exists(out + "/metrics.jsonl")) << flags;
  }
}

}  // namespace

// --distributed-timeout-minutes bounds every group's collectives: world rank 1 hangs at the start of
// step 2 (the hidden test flag --stall-rank-at-step), and its peer, waiting in the first collective
// of that step, ends the job within the timeout (3 s) with a message naming the group and the step.
// Under --dp 2 --ep 2 that collective is the first MoE layer's expert exchange over 'ep'; under
// --tp 2 --sp the first layer's tensor-parallel gather over 'tp'. Never a hang: `timeout` bounds the run.
TEST(ExpertParallel, HungExchangeEndsTheJobNamingGroupAndStep) {
  const std::string rows = scratch_dir("rows-stall");
  expect_runs(kQuill + " data synth --conversations 100 --row-tokens 32 --max-rows 16 --out " + rows);
  for (const auto& [layout, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--dp 2 --ep 2", "rank 0 (rank 0 of 2 in comm 'ep'): MPI all_to_all"},
           {"--tp 2 --sp", "rank 0 (rank 0 of 2 in comm 'tp'): MPI "}}) {
    SCOPED_TRACE(layout);
    const std::string out = scratch_dir("stall");
    quill::test::expect_watchdog_ends_stalled_job(
        "timeout 90 " + under_mpirun(2) + kQuill + " train --config " + kConfig + " --rows " + rows +
            " --seed 3 --steps 4 --global-batch 2 --lr 1e-2 --quiet " + layout +
            " --distributed-timeout-minutes 0.05 --stall-rank-at-step 1,2 --out " + out,
        expect);
    EXPECT_EQ(read_metrics(out).size(), 2u) << "the steps before the hang stay recorded (a resume continues there)";
  }
}

// Routing replay (--replay-routing at --dump-grads-step) under expert parallelism equals one rank
// replaying the same routing: every step's loss, gradient norm and counts, the weights after the run,
// and the dumped (summed, gathered) gradients of the replayed step. The routing is made to hit the
// edge cases: every token of the first two rows (rank 0's share under EP2) goes to expert 5 (the
// other slot to experts 0-3), the other rows spread over experts 0-6, and expert 7 gets no token on
// any rank; under EP4 ranks 0 and 1 send nothing to rank 3. Step 1's counts must be the file's (a
// replay that was ignored would show the router's own choice).
TEST(ExpertParallel, RoutingReplayEqualsOneRankReplaying) {
  const std::string rows = scratch_dir("rows-replay");
  expect_runs(kQuill + " data synth --conversations 200 --row-tokens 32 --max-rows 16 --out " + rows);
  const quill::InklingConfig config = quill::load_inkling_config(kConfig);
  const int64_t T = 32, B = 4, k = config.num_experts_per_tok, E = config.n_routed_experts;
  ASSERT_EQ(k, 2);
  ASSERT_EQ(E, 8);
  quill::Tensor topk = quill::Tensor::empty({B * T, k}, quill::DType::I32);
  std::vector<int64_t> counts(E, 0);
  for (int64_t j = 0; j < B; ++j)
    for (int64_t t = 0; t < T; ++t) {
      int32_t* s = topk.data_as<int32_t>() + (j * T + t) * k;
      if (j < 2) {
        s[0] = 5, s[1] = static_cast<int32_t>(t % 4);
      } else {
        s[0] = static_cast<int32_t>((t + j) % 7);
        s[1] = static_cast<int32_t>((s[0] + 1 + t % 3) % 7);
      }
      ++counts[s[0]], ++counts[s[1]];
    }
  ASSERT_EQ(counts[7], 0);
  std::vector<std::pair<std::string, quill::Tensor>> routing;
  int64_t moe_layers = 0;
  for (int64_t i = 0; i < config.num_layers; ++i)
    if (config.is_moe(i)) routing.emplace_back("model.llm.layers." + std::to_string(i) + ".mlp.gate.topk", topk), ++moe_layers;
  ASSERT_GT(moe_layers, 0);
  const std::string file = scratch_dir("routing") + ".safetensors";
  quill::write_safetensors(file, routing);

  const std::string train = " train --config " + kConfig + " --rows " + rows + " --seed 8 --steps 3 --global-batch 4" +
                            " --lr 1e-2 --quiet --dump-grads-step 1 --replay-routing " + file;
  const std::string one = scratch_dir("replay-one");
  expect_runs(kQuill + train + " --out " + one + " --save " + one + "/checkpoint");
  const auto ref = read_metrics(one);
  ASSERT_EQ(ref.size(), 3u);
  for (int64_t l = 0; l < moe_layers; ++l)
    EXPECT_EQ(ref[1]["expert_tokens"][l].get<std::vector<int64_t>>(), counts) << "one rank did not replay layer " << l;
  std::map<std::string, quill::Tensor> ref_weights;
  for (auto& [name, t] : quill::checkpoint_values(one + "/checkpoint")) ref_weights[name] = t;
  const quill::SafetensorsFile ref_grads = quill::SafetensorsFile::open(one + "/grads_step1.safetensors");

  for (const EpLayout& layout : std::vector<EpLayout>{{"--dp 2 --ep 2", 2}, {"--dp 4 --ep 4", 4}}) {
    SCOPED_TRACE(layout.flags);
    const std::string out = scratch_dir("replay-ep" + std::to_string(layout.ranks));
    expect_runs("timeout 120 " + under_mpirun(layout.ranks) + kQuill + train + " " + layout.flags + " --out " + out +
                " --save " + out + "/checkpoint");
    quill::test::expect_steps_match(read_metrics(out), ref);
    quill::test::expect_weights_match(out + "/checkpoint", ref_weights);
    const quill::SafetensorsFile grads = quill::SafetensorsFile::open(out + "/grads_step1.safetensors");
    ASSERT_EQ(grads.names(), ref_grads.names());
    for (const std::string& name : ref_grads.names())
      EXPECT_LE(relative_l2_f32(grads.tensor(name), ref_grads.tensor(name)), 1e-5) << name;
  }
  const quill::Tensor unused = ref_grads.tensor("model.llm.layers.1.mlp.experts.w2_weight");
  const int64_t per = unused.numel() / E;
  for (int64_t i = 7 * per; i < 8 * per; ++i)
    ASSERT_EQ(unused.data_as<float>()[i], 0.0f) << "expert 7 received no token: its gradient is zero";
}

// Under tensor or pipeline parallelism the gradient dump and the replay are refused before anything
// loads, naming the flags.
TEST(ExpertParallel, GradientDumpUnderTensorParallelismIsRefused) {
  const std::string rows = scratch_dir("rows-dump-tp");
  expect_runs(kQuill + " data synth --conversations 100 --row-tokens 32 --max-rows 8 --out " + rows);
  const std::string out = scratch_dir("dump-tp");
  const quill::test::CommandResult r = quill::test::run_command(
      "timeout 60 " + under_mpirun(2) + kQuill + " train --config " + kConfig + " --rows " + rows +
      " --steps 1 --global-batch 2 --quiet --tp 2 --dump-grads-step 0 --out " + out);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--dump-grads-step (and --replay-routing) under tp 2"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out + "/metrics.jsonl"));
}
