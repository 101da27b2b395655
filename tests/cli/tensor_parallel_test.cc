// Tensor (and sequence) parallelism on the CPU under mpirun: the single-rank command line plus --tp
// (--sp, --dp, --pp), against one rank on the same model and rows. Every step's loss and gradient
// norm within 1e-5 relative, the same expert counts, and the fp32 weights after 3 steps within 1e-5
// (the tensor-parallel sums come in another order than one rank's: equal up to float rounding).
// The model is tests/fixtures/configs/tiny-tp4.json: tiny with 8 query / 4 kv heads so that TP4
// holds 2 / 1 per rank, and a padded vocabulary of 400 (300 real) so that TP4's last vocabulary
// shard [300, 400) holds no column of the loss's softmax.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <unistd.h>

#include "io/safetensors.h"
#include "train/train_checkpoint.h"
#include "util/command.h"
#include "util/run_dir.h"

namespace {

namespace fs = std::filesystem;

std::string temp(const std::string& name) { return quill::test::fresh_temp_dir("tp", name); }

std::vector<nlohmann::json> metrics(const std::string& out) { return quill::test::read_metrics(out); }

void run_ok(const std::string& cmd) {
  const quill::test::CommandResult r = quill::test::run_command(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
}

std::string mpirun(int ranks) { return quill::test::mpirun_command(ranks); }

using quill::test::relative_l2_f32;

const std::string kQuill = QUILL_BINARY, kSrc = QUILL_SOURCE_DIR;
const std::string kConfig = kSrc + "/tests/fixtures/configs/tiny-tp4.json";

TEST(TensorParallel, LayoutsEqualOneRankEveryStep) {
  const std::string rows = temp("rows");
  run_ok(kQuill + " data synth --conversations 300 --row-tokens 32 --max-rows 64 --out " + rows);
  const std::string flags = " train --config " + kConfig + " --rows " + rows +
                            " --seed 5 --steps 3 --global-batch 4 --lr 1e-2 --weight-decay 0.1 --quiet";
  const std::string one = temp("one");
  run_ok(kQuill + flags + " --out " + one + " --save " + one + "/checkpoint");
  const auto ref = metrics(one);
  ASSERT_EQ(ref.size(), 3u);
  std::map<std::string, quill::Tensor> ref_w;
  for (auto& [n, t] : quill::checkpoint_values(one + "/checkpoint")) ref_w[n] = t;

  int index = 0;
  for (const auto& [layout, ranks] :
       {std::pair<std::string, int>{"--tp 2", 2}, {"--tp 2 --sp", 2}, {"--tp 4", 4}, {"--tp 4 --sp", 4},
        {"--tp 2 --dp 2", 4}, {"--tp 2 --sp --pp 2 --pp-layers 1,3", 4}}) {
    SCOPED_TRACE(layout);
    const std::string out = temp("layout" + std::to_string(index++));
    run_ok(mpirun(ranks) + kQuill + flags + " " + layout + " --out " + out + " --save " + out + "/checkpoint");
    quill::test::expect_steps_match(metrics(out), ref);
    quill::test::expect_weights_match(out + "/checkpoint", ref_w);
  }
}

// Sequence chunks shorter than the convolution's kernel (8-token rows over 4 ranks: chunks of 2,
// a halo of 3 from two ranks before), and the loss when a vocabulary shard holds none of its columns.
TEST(TensorParallel, ChunksShorterThanTheKernelEqualOneRank) {
  const std::string rows = temp("rows8");
  run_ok(kQuill + " data synth --conversations 200 --row-tokens 8 --max-rows 32 --out " + rows);
  const std::string flags = " train --config " + kConfig + " --rows " + rows +
                            " --seed 8 --steps 3 --global-batch 4 --lr 1e-2 --quiet";
  const std::string one = temp("one8"), tp = temp("tp4sp8");
  run_ok(kQuill + flags + " --out " + one);
  run_ok(mpirun(4) + kQuill + flags + " --tp 4 --sp --out " + tp);
  const auto a = metrics(one), b = metrics(tp);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (const char* key : {"loss", "grad_norm"})
      EXPECT_NEAR(b[i][key].get<double>(), a[i][key].get<double>(), 1e-5 * std::fabs(a[i][key].get<double>()))
          << key << " step " << i;
}

// A Hugging Face checkpoint loads into TP4 (each rank its slices) and TP4's export writes the same
// bytes as one rank's (--lr 0: the weights do not move, so the files must be identical).
TEST(TensorParallel, ExportUnderTensorParallelismIsByteIdentical) {
  const std::string rows = temp("rows-export");
  run_ok(kQuill + " data synth --conversations 200 --row-tokens 32 --max-rows 16 --out " + rows);
  const std::string init = temp("init");
  run_ok(kQuill + " train --config " + kConfig + " --rows " + rows +
         " --seed 9 --steps 2 --global-batch 2 --lr 1e-2 --quiet --save-hf --out " + init);
  const std::string flags = " train --init " + init + "/hf --rows " + rows + " --steps 1 --global-batch 2 --lr 0 --quiet --save-hf";
  const std::string one = temp("export-one"), tp = temp("export-tp4");
  run_ok(kQuill + flags + " --out " + one);
  run_ok(mpirun(4) + kQuill + flags + " --tp 4 --sp --out " + tp);
  const double l1 = metrics(one)[0]["loss"].get<double>(), l4 = metrics(tp)[0]["loss"].get<double>();
  EXPECT_NEAR(l4, l1, 1e-6 * l1) << "the same weights loaded into TP4";
  quill::test::expect_same_tensor_bytes(one + "/hf/model.safetensors", tp + "/hf/model.safetensors");
}

TEST(TensorParallel, ResumeIsBitIdentical) {
  const std::string rows = temp("rows-resume");
  run_ok(kQuill + " data synth --conversations 200 --row-tokens 32 --max-rows 32 --out " + rows);
  const std::string mpi = mpirun(2) + kQuill;
  const std::string flags = " train --config " + kConfig + " --rows " + rows +
                            " --seed 4 --steps 4 --global-batch 2 --lr 1e-2 --quiet --tp 2 --sp";
  const std::string whole = temp("whole"), parts = temp("parts");
  run_ok(mpi + flags + " --out " + whole);
  run_ok(mpi + flags + " --stop-after 2 --out " + parts + " --save " + parts + "/checkpoint");
  run_ok(mpi + flags + " --resume " + parts + "/checkpoint --out " + parts + " --save " + parts + "/checkpoint");
  const auto a = metrics(whole), b = metrics(parts);
  ASSERT_EQ(a.size(), 4u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << i;
    EXPECT_EQ(a[i]["grad_norm"], b[i]["grad_norm"]) << i;
  }
}

// Layouts that do not divide the model are refused before any rank starts or anything loads,
// naming the dimension and the flag.
TEST(TensorParallel, LayoutsThatDoNotDivideAreRefused) {
  const std::string rows = temp("rows-bad");
  run_ok(kQuill + " data synth --conversations 100 --row-tokens 30 --max-rows 8 --out " + rows);
  const std::string base = kQuill + " train --config " + kConfig + " --rows " + rows + " --steps 1 --global-batch 2 --quiet";
  for (const auto& [flags, message] : std::vector<std::pair<std::string, std::string>>{
           {"--tp 3", "--tensor-model-parallel-size 3 does not divide model.llm.embed.weight dimension 0"},
           {"--tp 8", "--tensor-model-parallel-size 8 does not divide model.llm.layers.0.attn.wk_dv.weight dimension 0 (4 heads"}}) {
    const std::string out = temp("bad");
    const quill::test::CommandResult r = quill::test::run_command(base + " " + flags + " --out " + out);
    EXPECT_NE(r.status, 0) << flags;
    EXPECT_NE(r.output.find(message), std::string::npos) << flags << ": " << r.output;
    EXPECT_FALSE(fs::exists(out + "/metrics.jsonl")) << flags;
  }
  // Rows of 30 tokens do not split into 4 sequence chunks: refused naming the rows and the flag.
  const std::string out = temp("bad-rows");
  const quill::test::CommandResult r = quill::test::run_command(mpirun(4) + base + " --tp 4 --sp --out " + out);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--tensor-model-parallel-size 4: the rows of"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(out + "/metrics.jsonl"));
}

}  // namespace

namespace {

// `quill run` of a recipe whose layout is TP2 with sequence parallelism (layout.tp 2,
// sequence_parallel true, and Megatron's --tensor-model-parallel-size 2 --sequence-parallel
// --expert-tensor-parallel-size 1 in its run flags), launched with mpirun, equals the one-process
// recipe step for step (configs/tiny.json: 4 q / 2 kv heads, 1 kv head per rank).
TEST(TensorParallel, QuillRunOfATensorParallelRecipeEqualsOneRank) {
  const std::string rows = temp("run-rows");
  run_ok(kQuill + " data synth --input " + kSrc + "/data/synthetic/conversations.jsonl --row-tokens 128 --out " + rows);
  const std::string text = quill::test::edited_text(
      kSrc + "/recipes/tiny-cpu.yaml",
      {{"  count: 1\n", "  count: 2\n"},
       {"  per_node: 1\n", "  per_node: 2\n"},
       {"  label: DP1\n", "  label: TP2-SP\n"},
       {"  tp: 1\n", "  tp: 2\n"},
       {"  sequence_parallel: false\n", "  sequence_parallel: true\n"},
       {"--moe-token-dispatcher-type alltoall",
        "--moe-token-dispatcher-type alltoall --tensor-model-parallel-size 2 --sequence-parallel "
        "--expert-tensor-parallel-size 1"}});
  const std::string recipe = temp("tp2.yaml");
  std::ofstream(recipe) << text;
  const std::string one = temp("run-one"), two = temp("run-tp2");
  run_ok("cd " + kSrc + " && " + kQuill + " run recipes/tiny-cpu.yaml --set SFT_DATA=" + rows + " --out " + one +
         " --steps 6");
  run_ok("cd " + kSrc + " && " + mpirun(2) + kQuill + " run " + recipe + " --set SFT_DATA=" + rows + " --out " + two +
         " --steps 6");
  const auto a = metrics(one), b = metrics(two);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i)
    for (const char* key : {"loss", "grad_norm"})
      EXPECT_NEAR(b[i][key].get<double>(), a[i][key].get<double>(), 1e-5 * std::fabs(a[i][key].get<double>()))
          << key << " step " << i;
}

}  // namespace
