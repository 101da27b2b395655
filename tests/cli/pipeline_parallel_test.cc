// Pipeline parallelism on the CPU under mpirun: the single-rank command line plus --pp (and --dp),
// against one rank on the same model and rows: every step's loss and gradient norm within 1e-5
// (the stages do the same arithmetic in the same order: they come out equal), the same expert
// counts, the fp32 weights after the steps within 1e-5, the Hugging Face export's tensors
// byte-identical (within float rounding with data parallelism too), and a resume bit-identical to
// the uninterrupted pipelined run. Splits: a first stage holding only the dense layer 0 (1,3), one
// layer per stage (PP4), PP2 x DP2 (3,1), and an uneven PP4 (2,2,1,1) of a 6-layer tiny.
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

std::string temp(const std::string& name) { return quill::test::fresh_temp_dir("pp", name); }

std::vector<nlohmann::json> metrics(const std::string& out) { return quill::test::read_metrics(out); }

void run_ok(const std::string& cmd) {
  const quill::test::CommandResult r = quill::test::run_command(cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
}

TEST(PipelineParallel, StagesEqualOneRankEveryStep) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows");
  run_ok(quill + " data synth --conversations 300 --row-tokens 64 --max-rows 64 --out " + rows);
  const std::string flags = " train --config " + src + "/configs/tiny.json --rows " + rows +
                            " --seed 3 --steps 4 --global-batch 4 --lr 1e-2 --weight-decay 0.1 --quiet --save-hf"
                            " --save-hf-dtype fp32";
  const std::string one = temp("one");
  run_ok(quill + flags + " --out " + one + " --save " + one + "/checkpoint");
  const auto ref = metrics(one);
  ASSERT_EQ(ref.size(), 4u);
  std::map<std::string, quill::Tensor> ref_w;
  for (auto& [n, t] : quill::checkpoint_values(one + "/checkpoint")) ref_w[n] = t;
  const quill::SafetensorsFile ref_hf = quill::SafetensorsFile::open(one + "/hf/model.safetensors");

  int index = 0;
  for (const auto& [layout, ranks] : {std::pair<std::string, int>{"--pp 2 --pp-layers 1,3", 2}, {"--pp 4", 4},
                                      {"--pp 2 --dp 2 --pp-layers 3,1", 4}}) {
    SCOPED_TRACE(layout);
    const std::string out = temp("layout" + std::to_string(index++));
    run_ok(std::string(QUILL_MPIEXEC) + " -np " + std::to_string(ranks) + " " + quill + flags + " " + layout + " --out " +
           out + " --save " + out + "/checkpoint");
    quill::test::expect_steps_match(metrics(out), ref);
    quill::test::expect_weights_match(out + "/checkpoint", ref_w);
    // The fp32 export: byte-identical without data parallelism (the same arithmetic); with it,
    // within float rounding (the data-parallel reduction sums in another order).
    const bool data_parallel = layout.find("--dp") != std::string::npos;
    const quill::SafetensorsFile hf = quill::SafetensorsFile::open(out + "/hf/model.safetensors");
    ASSERT_EQ(hf.names(), ref_hf.names());
    for (const std::string& n : ref_hf.names()) {
      const quill::Tensor a = hf.raw(n), b = ref_hf.raw(n);
      ASSERT_EQ(a.nbytes(), b.nbytes()) << n;
      if (!data_parallel) {
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.nbytes()), 0) << "export of " << n;
        continue;
      }
      const quill::Tensor x = hf.tensor(n), y = ref_hf.tensor(n);
      double num = 0, den = 0;
      for (int64_t k = 0; k < y.numel(); ++k) {
        const double d = static_cast<double>(x.data_as<float>()[k]) - y.data_as<float>()[k];
        num += d * d, den += static_cast<double>(y.data_as<float>()[k]) * y.data_as<float>()[k];
      }
      EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), 1e-5) << "export of " << n;
    }
  }
}

// PP4 with an uneven split on a 6-layer tiny (tests/fixtures/configs/tiny6.json: a dense layer in the middle, a
// stage holding only it): every step's loss bit-identical to one rank, gradient norms within 1e-5.
TEST(PipelineParallel, UnevenFourStagesEqualOneRank) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows6");
  run_ok(quill + " data synth --conversations 300 --row-tokens 64 --max-rows 64 --out " + rows);
  const std::string flags = " train --config " + src + "/tests/fixtures/configs/tiny6.json --rows " + rows +
                            " --seed 6 --steps 3 --global-batch 4 --lr 1e-2 --quiet";
  const std::string one = temp("one6"), pp = temp("pp4-uneven");
  run_ok(quill + flags + " --out " + one);
  run_ok(std::string(QUILL_MPIEXEC) + " -np 4 " + quill + flags + " --pp 4 --pp-layers 2,2,1,1 --out " + pp);
  const auto a = metrics(one), b = metrics(pp);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << i;
    EXPECT_NEAR(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>(), 1e-5 * a[i]["grad_norm"].get<double>()) << i;
    EXPECT_EQ(a[i]["expert_tokens"], b[i]["expert_tokens"]) << i;
  }
}

TEST(PipelineParallel, ResumeIsBitIdentical) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("rows-resume");
  run_ok(quill + " data synth --conversations 300 --row-tokens 64 --max-rows 64 --out " + rows);
  const std::string mpi = std::string(QUILL_MPIEXEC) + " -np 2 " + quill;
  const std::string flags = " train --config " + src + "/configs/tiny.json --rows " + rows +
                            " --seed 4 --steps 4 --global-batch 4 --lr 1e-2 --quiet --pp 2 --pp-layers 1,3";
  const std::string whole = temp("whole"), parts = temp("parts");
  run_ok(mpi + flags + " --out " + whole);
  run_ok(mpi + flags + " --stop-after 2 --out " + parts + " --save " + parts + "/checkpoint");
  run_ok(mpi + flags + " --resume " + parts + "/checkpoint --out " + parts + " --save " + parts + "/checkpoint");
  const auto a = metrics(whole), b = metrics(parts);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << i;
    EXPECT_EQ(a[i]["grad_norm"], b[i]["grad_norm"]) << i;
  }
}

}  // namespace

namespace {

// `quill run` of a recipe whose layout is two pipeline stages (layout.pp 2, layer_split first 1, and
// Megatron's --pipeline-model-parallel-size / --decoder-first-pipeline-num-layers in its run flags),
// launched with mpirun, equals the one-process recipe step for step.
TEST(PipelineParallel, QuillRunOfAPipelinedRecipeEqualsOneRank) {
  const std::string quill = QUILL_BINARY, src = QUILL_SOURCE_DIR, rows = temp("run-rows");
  run_ok(quill + " data synth --input " + src + "/data/synthetic/conversations.jsonl --row-tokens 128 --out " + rows);
  const std::string text = quill::test::edited_text(
      src + "/recipes/tiny-cpu.yaml",
      {{"  count: 1\n", "  count: 2\n"},
       {"  per_node: 1\n", "  per_node: 2\n"},
       {"  label: DP1\n", "  label: PP2\n"},
       {"  pp: 1\n", "  pp: 2\n  layer_split:\n    first: 1\n"},
       {"--moe-token-dispatcher-type alltoall",
        "--moe-token-dispatcher-type alltoall --pipeline-model-parallel-size 2 --decoder-first-pipeline-num-layers 1"}});
  const std::string recipe = temp("pp2.yaml");
  std::ofstream(recipe) << text;
  const std::string one = temp("run-one"), two = temp("run-pp2");
  run_ok("cd " + src + " && " + quill + " run recipes/tiny-cpu.yaml --set SFT_DATA=" + rows + " --out " + one + " --steps 6");
  run_ok("cd " + src + " && " + std::string(QUILL_MPIEXEC) + " -np 2 " + quill + " run " + recipe + " --set SFT_DATA=" +
         rows + " --out " + two + " --steps 6");
  const auto a = metrics(one), b = metrics(two);
  ASSERT_EQ(a.size(), 6u);
  ASSERT_EQ(b.size(), a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i]["loss"], b[i]["loss"]) << i;
    EXPECT_NEAR(a[i]["grad_norm"].get<double>(), b[i]["grad_norm"].get<double>(), 1e-5 * a[i]["grad_norm"].get<double>()) << i;
  }
}

}  // namespace
