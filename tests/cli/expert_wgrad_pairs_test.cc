// --moe-expert-wgrad-micro-batches 2 (model/expert_wgrad_pairs.h, docs/decisions/expert-wgrad-pairs.md): the
// routed experts' weight gradients of two consecutive micro-batches in one grouped GEMM per matrix. A numerics
// option: at one rank it agrees with one GEMM per micro-batch to fp32 rounding (and is not the same path: some
// weight bits differ); every layout with it agrees with one rank with it (1e-5), with an odd micro-batch count
// too (the last one alone); recompute with it changes no bit; and the memory plan predicts its CPU peak
// (tests/cli/plan_cli_test.cc).
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "train/train_checkpoint.h"
#include "util/command.h"
#include "util/run_dir.h"

namespace {

const std::string kQuill = QUILL_BINARY, kSrc = QUILL_SOURCE_DIR;
// 4 layers (dense, then MoE with 8 experts), hidden 64, vocabulary 400.
const std::string kConfig = kSrc + "/tests/fixtures/configs/tiny-tp4.json";
const std::string kPairs = " --moe-expert-wgrad-micro-batches 2";

std::string scratch(const std::string& name) { return quill::test::fresh_temp_dir("wgrad-pairs", name); }

std::string train_flags(int global_batch) {
  return " train --config " + kConfig + " --rows " + quill::test::small_rows_once("wgrad-pairs") + " --seed 5 --steps 3 --global-batch " +
         std::to_string(global_batch) + " --lr 1e-2 --weight-decay 0.1 --quiet";
}

std::map<std::string, quill::Tensor> weights_of(const std::string& out) {
  std::map<std::string, quill::Tensor> w;
  for (auto& [name, t] : quill::checkpoint_values(out + "/checkpoint")) w[name] = t;
  return w;
}

// One run into a fresh OUT with its checkpoint; returns OUT.
std::string train(const std::string& name, int ranks, const std::string& flags, int global_batch = 8) {
  const std::string out = scratch(name);
  quill::test::run_checked("timeout -k 5 120 " + quill::test::mpirun_command(ranks) + kQuill + train_flags(global_batch) +
                           flags + " --out " + out + " --save " + out + "/checkpoint");
  return out;
}

TEST(ExpertWgradPairs, OneRankAgreesWithOneGemmPerMicroBatch) {
  const std::string one = train("one", 1, ""), pairs = train("one-pairs", 1, kPairs);
  EXPECT_EQ(quill::test::read_json(pairs + "/summary.json").at("moe_expert_wgrad_micro_batches"), 2);
  EXPECT_EQ(quill::test::read_json(one + "/summary.json").at("moe_expert_wgrad_micro_batches"), 1);
  quill::test::expect_steps_match(quill::test::read_metrics(pairs), quill::test::read_metrics(one));
  quill::test::expect_weights_match(pairs + "/checkpoint", weights_of(one));
  // Not the same path: the merged sums run in another order, so some routed expert's fp32 weights move by an ulp.
  const auto ref = weights_of(one);
  int differing = 0;
  for (auto& [name, t] : weights_of(pairs)) differing += std::memcmp(ref.at(name).data(), t.data(), t.nbytes()) != 0;
  EXPECT_GT(differing, 0) << "every weight bit equals the one-GEMM-per-micro-batch run's: were the rows paired?";
}

// Every layout with the flag against one rank with it: 4 micro-batches per data-parallel rank (two pairs), and
// 3 (a pair and one alone); the pipeline's stages run their backwards in micro-batch order, interleaved with
// forwards that allocate beside the held rows; the delayed weight gradients merge beside the return exchange.
TEST(ExpertWgradPairs, EveryLayoutAgreesWithOneRank) {
  struct Case {
    std::string name, flags;
    int ranks, global_batch;
    std::string numerics = "";  // flags of the one-rank reference too
  };
  const std::string fp8 = " --fp8-format e4m3 --fp8-recipe blockwise";
  const Case cases[] = {
      {"dp2", " --dp 2", 2, 8},
      {"dp2-odd", " --dp 2", 2, 6},
      {"tp2sp", " --tp 2 --sp --tp-comm-overlap", 2, 8},
      {"ep2-dp2", " --dp 2 --ep 2 --delay-wgrad-compute --moe-shared-expert-overlap", 2, 8},
      {"pp2", " --pp 2 --pp-layers 2,2", 2, 6},
      {"ep2-combined", " --dp 2 --ep 2 --overlap-moe-expert-parallel-comm", 2, 8},
      // FP8: the merged rows quantised as one tensor, per expert. The pipeline sums each micro-batch's GEMMs in one
      // rank's order, so FP8 holds 1e-5 there (layouts that split the sums move FP8 values across rounding
      // boundaries: tests/cli/fp8_layouts_test.cc).
      {"pp2-fp8", " --pp 2 --pp-layers 2,2", 2, 6, fp8},
  };
  std::map<std::string, std::string> one;  // global batch and numerics -> the one-rank run with the flag
  for (const Case& c : cases) {
    SCOPED_TRACE(c.flags + c.numerics + " global batch " + std::to_string(c.global_batch));
    const std::string key = std::to_string(c.global_batch) + c.numerics;
    if (!one.count(key))
      one[key] = train("one-pairs-" + std::to_string(one.size()), 1, kPairs + c.numerics, c.global_batch);
    const std::string& ref = one[key];
    const std::string out = train(c.name, c.ranks, kPairs + c.numerics + c.flags, c.global_batch);
    quill::test::expect_steps_match(quill::test::read_metrics(out), quill::test::read_metrics(ref));
    quill::test::expect_weights_match(out + "/checkpoint", weights_of(ref));
  }
}

// Recompute with the pairs held across micro-batches changes no bit, at one rank and under the pipeline.
TEST(ExpertWgradPairs, RecomputeChangesNoBit) {
  for (const auto& [name, layout, ranks] : {std::tuple{"one", "", 1}, std::tuple{"pp2", " --pp 2 --pp-layers 2,2", 2}}) {
    SCOPED_TRACE(name);
    const std::string plain = train(std::string("rc-plain-") + name, ranks, kPairs + layout);
    const std::string selective = train(std::string("rc-selective-") + name, ranks,
                                        kPairs + layout + " --recompute-granularity selective --recompute-modules "
                                                          "moe_act layernorm");
    quill::test::expect_runs_bit_identical(plain, selective, 3);
    const std::string full = train(std::string("rc-full-") + name, ranks,
                                   kPairs + layout + " --recompute-granularity full --recompute-method uniform "
                                                     "--recompute-num-layers 1");
    quill::test::expect_runs_bit_identical(plain, full, 3);
  }
}

// One micro-batch per step on each pipeline: nothing to pair, said before the run (which then runs as without it).
TEST(ExpertWgradPairs, SaysWhenThereIsNoSecondMicroBatch) {
  const std::string out = scratch("single");
  const quill::test::CommandResult r = quill::test::run_command(
      "timeout -k 5 120 " + quill::test::mpirun_command(2) + kQuill + train_flags(2) + kPairs + " --dp 2 --out " + out);
  ASSERT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--moe-expert-wgrad-micro-batches 2 has no effect with one micro-batch per step on each "
                          "pipeline (--global-batch 2 over 2 data-parallel ranks)"), std::string::npos) << r.output;
}

TEST(ExpertWgradPairs, RefusesOtherCounts) {
  const quill::test::CommandResult r = quill::test::run_command(kQuill + train_flags(8) + " --moe-expert-wgrad-micro-batches 3 --out " + scratch("three"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--moe-expert-wgrad-micro-batches"), std::string::npos) << r.output;
}

}  // namespace
