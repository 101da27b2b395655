// Megatron's --overlap-grad-reduce and --overlap-param-gather on CPU ranks under mpirun
// (docs/decisions/overlap-grad-param.md), --tp-comm-overlap (docs/decisions/tp-comm-overlap.md),
// --delay-wgrad-compute (docs/decisions/delay-wgrad.md) and --overlap-moe-expert-parallel-comm
// (docs/decisions/combined-1f1b.md):
// each layout run with the flags off and on, with buckets
// small enough that every stage has several (--ddp-bucket-size), must give every step's loss,
// gradient norm and expert counts and every fp32 weight bit for bit; the small buckets themselves
// must agree with the default ones (one per kind for these models) within float rounding; a
// checkpoint written with the overlap off resumes with it on, and the other way round, to the
// uninterrupted run's bits; and a peer that hangs while the others wait in an overlapped collective
// ends the job with a message naming the group, the collective and the step.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "train/train_checkpoint.h"
#include "util/command.h"
#include "util/run_dir.h"
#include "util/watchdog_check.h"

namespace {

const std::string kQuill = QUILL_BINARY, kSrc = QUILL_SOURCE_DIR;
// 4 layers (dense, then MoE with 8 experts), hidden 64, vocabulary 400: a layer's tensors hold 10-50k
// elements, so 20,000 elements make about one bucket per layer and kind.
const std::string kConfig = kSrc + "/tests/fixtures/configs/tiny-tp4.json";
const std::string kBuckets = " --ddp-bucket-size 20000";
const std::string kBoth = " --overlap-grad-reduce --overlap-param-gather";

std::string scratch(const std::string& name) { return quill::test::fresh_temp_dir("overlap", name); }

void expect_runs(const std::string& cmd) {
  const quill::test::CommandResult r = quill::test::run_command("timeout -k 5 120 " + cmd);
  ASSERT_EQ(r.status, 0) << cmd << "\n" << r.output;
}

std::string rows_dir() { return quill::test::small_rows_once("overlap"); }

std::string train_flags(int steps) {
  return " train --config " + kConfig + " --rows " + rows_dir() + " --seed 5 --steps " + std::to_string(steps) +
         " --global-batch 8 --lr 1e-2 --weight-decay 0.1 --quiet";
}

struct OverlapLayout {
  std::string name, flags;
  int ranks;
};

const std::vector<OverlapLayout> kLayouts = {
    {"dp2", "--dp 2", 2},
    {"tp2sp-dp2", "--tp 2 --sp --dp 2", 4},  // the replicated norms' tensor-parallel all-reduce first
    {"ep2-dp2", "--dp 4 --ep 2", 4},         // dense buckets over dp 4, the experts' over edp 2
    {"pp2-dp2", "--pp 2 --dp 2 --pp-layers 2,2", 4},  // the last micro-batch is each stage's last backward
};

std::map<std::string, quill::Tensor> checkpoint_weights(const std::string& checkpoint) {
  std::map<std::string, quill::Tensor> w;
  for (auto& [name, t] : quill::checkpoint_values(checkpoint)) w[name] = t;
  return w;
}

TEST(Overlap, FlagsOnEqualFlagsOffBitForBit) {
  for (const OverlapLayout& layout : kLayouts) {
    SCOPED_TRACE(layout.flags);
    const std::string run = quill::test::mpirun_command(layout.ranks) + kQuill + train_flags(3) + " " + layout.flags;
    const std::string plain = scratch(layout.name + "-default"), off = scratch(layout.name + "-off"),
                      on = scratch(layout.name + "-on");
    expect_runs(run + " --out " + plain + " --save " + plain + "/checkpoint");
    expect_runs(run + kBuckets + " --out " + off + " --save " + off + "/checkpoint");
    expect_runs(run + kBuckets + kBoth + " --out " + on + " --save " + on + "/checkpoint");
    // The small buckets split every stage (several per kind), and move no result beyond float rounding.
    const nlohmann::json summary = quill::test::read_json(on + "/summary.json");
    EXPECT_GE(summary.at("ddp_buckets").get<int64_t>(), 3) << summary.dump();
    EXPECT_EQ(summary.at("overlap_grad_reduce"), true);
    EXPECT_EQ(summary.at("overlap_param_gather"), true);
    EXPECT_EQ(summary.at("ddp_bucket_size"), 20000);
    EXPECT_EQ(quill::test::read_json(plain + "/summary.json").at("overlap_grad_reduce"), false);
    quill::test::expect_steps_match(quill::test::read_metrics(off), quill::test::read_metrics(plain));
    quill::test::expect_weights_match(off + "/checkpoint", checkpoint_weights(plain + "/checkpoint"));
    // The flags move when the collectives are issued, nothing else.
    quill::test::expect_runs_bit_identical(off, on, 3);
  }
}

// Each flag alone, where the two interact least and most: data parallelism, and the pipeline (whose
// first stage forwards several micro-batches before any backward).
TEST(Overlap, EachFlagAloneEqualsFlagsOff) {
  for (const OverlapLayout& layout : {kLayouts[0], kLayouts[3]}) {
    const std::string run = quill::test::mpirun_command(layout.ranks) + kQuill + train_flags(3) + " " + layout.flags +
                            kBuckets;
    const std::string off = scratch(layout.name + "-alone-off");
    expect_runs(run + " --out " + off + " --save " + off + "/checkpoint");
    for (const std::string flag : {"--overlap-grad-reduce", "--overlap-param-gather"}) {
      SCOPED_TRACE(layout.flags + " " + flag);
      const std::string out = scratch(layout.name + flag);
      expect_runs(run + " " + flag + " --out " + out + " --save " + out + "/checkpoint");
      quill::test::expect_runs_bit_identical(off, out, 3);
    }
  }
}

// A checkpoint does not record whether the collectives overlapped: one written with the overlap off
// resumes with it on, and one written with it on resumes with it off, to the bits of the
// uninterrupted run. (Its pieces are keyed by parameter name and global element range, so it also
// resumes under another bucket size, which changes every rank's shard: within float rounding, since
// the norm's partial sums follow the shards.)
TEST(Overlap, ResumesWithTheOverlapOnOrOffToTheSameBits) {
  const std::string dp2 = quill::test::mpirun_command(2) + kQuill + train_flags(4) + " --dp 2";
  const std::string run = dp2 + kBuckets;
  const std::string whole = scratch("resume-whole");
  expect_runs(run + " --out " + whole + " --save " + whole + "/checkpoint");
  for (const auto& [first, second] : {std::pair<std::string, std::string>{"", kBoth}, {kBoth, ""}}) {
    SCOPED_TRACE("first part '" + first + "', second part '" + second + "'");
    const std::string parts = scratch(first.empty() ? "resume-off-on" : "resume-on-off");
    expect_runs(run + first + " --stop-after 2 --out " + parts + " --save " + parts + "/checkpoint");
    expect_runs(run + second + " --resume " + parts + "/checkpoint --out " + parts + " --save " + parts + "/checkpoint");
    quill::test::expect_runs_bit_identical(whole, parts, 4);
  }
  const std::string other = scratch("resume-other-buckets");
  expect_runs(run + " --stop-after 2 --out " + other + " --save " + other + "/checkpoint");
  expect_runs(dp2 + kBoth + " --ddp-bucket-size 7000 --resume " + other + "/checkpoint --out " + other + " --save " +
              other + "/checkpoint");
  quill::test::expect_steps_match(quill::test::read_metrics(other), quill::test::read_metrics(whole), 1e-6);
  quill::test::expect_weights_match(other + "/checkpoint", checkpoint_weights(whole + "/checkpoint"), 1e-6);
}

// World rank 1 hangs at the start of step 2 (the hidden --stall-rank-at-step); rank 0 waits in the
// step's first collective, which the overlap moved into the passes: the first bucket's reduce-scatter
// in the backward, or the first bucket's all-gather in the forward. The watchdog ends the job within
// the timeout (3 s), naming the group, the collective and the step; `timeout` bounds the run.
TEST(Overlap, HungPeerDuringAnOverlappedCollectiveEndsTheJobNamingGroupAndStep) {
  for (const auto& [flag, expect] : std::vector<std::pair<std::string, std::string>>{
           {"--overlap-grad-reduce", "rank 0 (rank 0 of 2 in comm 'dp-cp'): MPI reduce_scatter"},
           {"--overlap-param-gather", "rank 0 (rank 0 of 2 in comm 'dp-cp'): MPI all_gather"},
           // The combined 1F1B's two host threads: the watchdog still ends the job (the stalled peer is met in the
           // step's first exchange, before its first combined pass).
           {"--ep 2 --overlap-moe-expert-parallel-comm", "rank 0 (rank 0 of 2 in comm 'ep'): MPI all_to_all"}}) {
    SCOPED_TRACE(flag);
    const std::string out = scratch("stall" + flag.substr(flag.rfind(' ') + 1));
    quill::test::expect_watchdog_ends_stalled_job(
        "timeout 90 " + quill::test::mpirun_command(2) + kQuill + train_flags(4) + " --dp 2" + kBuckets + " " + flag +
            " --distributed-timeout-minutes 0.05 --stall-rank-at-step 1,2 --out " + out,
        expect);
  }
}

// `layout` run 3 steps without and with `flag`: the summary records it (under `key`), and every step's
// loss, gradient norm and expert counts and every fp32 weight are the same bits.
// Returns the run directory with the flag on.
std::string expect_flag_moves_no_bit(const OverlapLayout& layout, const std::string& flag, const std::string& key) {
  SCOPED_TRACE(layout.flags + " " + flag);
  const std::string run = quill::test::mpirun_command(layout.ranks) + kQuill + train_flags(3) + " " + layout.flags;
  const std::string off = scratch(layout.name + flag + "-off"), on = scratch(layout.name + flag + "-on");
  expect_runs(run + " --out " + off + " --save " + off + "/checkpoint");
  expect_runs(run + " " + flag + " --out " + on + " --save " + on + "/checkpoint");
  EXPECT_EQ(quill::test::read_json(on + "/summary.json").at(key), true);
  EXPECT_EQ(quill::test::read_json(off + "/summary.json").at(key), false);
  quill::test::expect_runs_bit_identical(off, on, 3);
  return on;
}

// --tp-comm-overlap starts the sequence-parallel reduce-scatters and all-gathers that a GEMM can hide
// (the attention's and the dense MLP's input gradients, the shared experts' four, the attention's output in
// two pieces) and waits for them later: alone, at four ranks, with the shared experts inside the token
// exchange, under expert and pipeline parallelism, and with every other overlap, the same bits as with none.
TEST(Overlap, TpCommOverlapEqualsOffBitForBit) {
  const std::vector<OverlapLayout> layouts = {
      {"tp2sp", "--tp 2 --sp", 2},
      // Four ranks: the reduce-scatters' sums of more than two terms, whose order would show a changed collective.
      {"tp4sp", "--tp 4 --sp", 4},
      {"tp2sp-ep2-shared", "--tp 2 --sp --ep 2 --moe-shared-expert-overlap", 2},
      {"tp2sp-dp2-ep2", "--tp 2 --sp --dp 2 --ep 2 --moe-shared-expert-overlap" + kBuckets + kBoth, 4},
      {"tp2sp-pp2", "--tp 2 --sp --pp 2 --pp-layers 2,2", 4},
  };
  for (const OverlapLayout& layout : layouts) expect_flag_moves_no_bit(layout, "--tp-comm-overlap", "tp_comm_overlap");
  // Without sequence parallelism there is nothing it overlaps: refused, naming both flags.
  for (const std::string layout : {" --tp 2", " --dp 2"}) {
    const quill::test::CommandResult r = quill::test::run_command(
        "timeout -k 5 60 " + quill::test::mpirun_command(2) + kQuill + train_flags(1) + layout +
        " --tp-comm-overlap --out " + scratch("tp-no-sp"));
    EXPECT_NE(r.status, 0) << layout;
    EXPECT_NE(r.output.find("--tp-comm-overlap needs --tensor-model-parallel-size above 1 with --sequence-parallel"),
              std::string::npos)
        << r.output;
  }
}

// --delay-wgrad-compute moves the routed experts' two weight gradients after the start of the backward's
// return exchange: under expert parallelism alone, with the tensor-parallel and shared-expert overlaps, and
// under the pipeline, the same bits as without it; without expert parallelism it only notes that it does
// nothing.
TEST(Overlap, DelayWgradComputeEqualsOffBitForBit) {
  const std::vector<OverlapLayout> layouts = {
      {"dp2-ep2", "--dp 2 --ep 2", 2},
      // With selective recompute: the backward's norms and gathers made again take turns too.
      {"tp2sp-ep2-all", "--tp 2 --sp --ep 2 --tp-comm-overlap --moe-shared-expert-overlap --recompute-granularity "
                        "selective --recompute-modules moe_act layernorm", 2},
      {"pp2-dp2-ep2", "--pp 2 --dp 2 --ep 2 --pp-layers 2,2", 4},
  };
  for (const OverlapLayout& layout : layouts)
    expect_flag_moves_no_bit(layout, "--delay-wgrad-compute", "delay_wgrad_compute");
  const quill::test::CommandResult r =
      quill::test::run_command(kQuill + train_flags(1) + " --delay-wgrad-compute --out " + scratch("wgrad-ep1"));
  EXPECT_EQ(r.status, 0) << r.output;
  EXPECT_NE(r.output.find("--delay-wgrad-compute has no effect without expert parallelism"), std::string::npos)
      << r.output;
}

// --overlap-moe-expert-parallel-comm runs the combined 1F1B (F0, then each forward interleaved with the
// previous micro-batch's backward at their token exchanges, on two host threads taking turns): under expert
// parallelism alone, with every other overlap, with tensor parallelism, in FP8 and with recompute, the same bits
// as without it. With a pipeline it is refused naming the flags; without expert parallelism it only notes.
TEST(Overlap, CombinedOneFOneBEqualsOffBitForBit) {
  const std::vector<OverlapLayout> layouts = {
      {"dp2-ep2", "--dp 2 --ep 2", 2},
      {"dp2-ep2-all", "--dp 2 --ep 2 --moe-shared-expert-overlap --delay-wgrad-compute" + kBuckets + kBoth, 2},
      // With selective recompute: the backward's norms and gathers made again take turns too.
      {"tp2sp-ep2-all", "--tp 2 --sp --ep 2 --tp-comm-overlap --moe-shared-expert-overlap --recompute-granularity "
                        "selective --recompute-modules moe_act layernorm", 2},
      {"dp2-ep2-fp8", "--dp 2 --ep 2 --fp8-format e4m3 --fp8-recipe blockwise", 2},
      {"dp4-ep4-recompute", "--dp 4 --ep 4 --recompute-granularity full --recompute-method uniform --recompute-num-layers 2", 4},
  };
  for (const OverlapLayout& layout : layouts) {
    const std::string on =
        expect_flag_moves_no_bit(layout, "--overlap-moe-expert-parallel-comm", "overlap_moe_expert_parallel_comm");
    // The passes did take turns: every step ran combined steps (rank 0's micro-batches less one), each
    // handing over at the token exchanges (up to four per MoE layer, three MoE layers here).
    for (const nlohmann::json& m : quill::test::read_metrics(on)) {
      EXPECT_GT(m.value("combined_steps", 0), 0) << layout.flags;
      EXPECT_GE(m.value("combined_pass_switches", 0), 3 * m.value("combined_steps", 0)) << layout.flags;
    }
  }
  const quill::test::CommandResult pp = quill::test::run_command(
      "timeout -k 5 60 " + quill::test::mpirun_command(2) + kQuill + train_flags(1) +
      " --pp 2 --pp-layers 2,2 --overlap-moe-expert-parallel-comm --out " + scratch("combined-pp2"));
  EXPECT_NE(pp.status, 0);
  EXPECT_NE(pp.output.find("--overlap-moe-expert-parallel-comm needs --pipeline-model-parallel-size 1 (got 2)"),
            std::string::npos) << pp.output;
  const quill::test::CommandResult ep1 = quill::test::run_command(
      kQuill + train_flags(1) + " --overlap-moe-expert-parallel-comm --out " + scratch("combined-ep1"));
  EXPECT_EQ(ep1.status, 0) << ep1.output;
  EXPECT_NE(ep1.output.find("--overlap-moe-expert-parallel-comm has no effect without expert parallelism"),
            std::string::npos) << ep1.output;
}

// A checkpoint written without the combined step resumes with it to the uninterrupted run's bits (the flag keeps
// no state of its own).
TEST(Overlap, CombinedOneFOneBResumesToTheSameBits) {
  const std::string run = quill::test::mpirun_command(2) + kQuill + train_flags(4) + " --dp 2 --ep 2";
  const std::string whole = scratch("combined-whole"), parts = scratch("combined-parts");
  expect_runs(run + " --overlap-moe-expert-parallel-comm --out " + whole + " --save " + whole + "/checkpoint");
  expect_runs(run + " --stop-after 2 --out " + parts + " --save " + parts + "/checkpoint");
  expect_runs(run + " --overlap-moe-expert-parallel-comm --resume " + parts + "/checkpoint --out " + parts + " --save " +
              parts + "/checkpoint");
  quill::test::expect_runs_bit_identical(whole, parts, 4);
}

TEST(Overlap, GradientDumpWithOverlappedReductionIsRefused) {
  const quill::test::CommandResult r = quill::test::run_command(
      kQuill + train_flags(2) + " --overlap-grad-reduce --dump-grads-step 0 --out " + scratch("dump"));
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.output.find("--dump-grads-step reads the gradients before their reduction"), std::string::npos)
      << r.output;
}

}  // namespace
