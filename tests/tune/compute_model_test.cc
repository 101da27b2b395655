// The compute model (tune/compute_model.h): its FLOP counts are the CUDA profiler's for the slice
// (bench/results/2026-11-30-slice-v6/op_profile_gb1.json), and with the rates taken from the slice's
// 8-row table it gives the slice's measured steps (8 rows: 1,411.0 ms median; 1 row: 211.3 ms, a figure
// the rates were not taken from); offload and bf16 moments move the optimizer's time the right way.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/config.h"
#include "model/params.h"
#include "tune/compute_model.h"

namespace quill::tune {
namespace {

const std::string kSrc = QUILL_SOURCE_DIR;

LedgerWorkload slice_workload(int64_t rows) {
  LedgerWorkload w;
  w.row_tokens = 8192;
  w.global_batch = rows;
  w.device = Device::CUDA;
  w.freeze = miles_frozen_patterns();  // as bench/slice/run.sh trains it (quill train's default preset)
  return w;
}

TEST(ComputeModel, FlopsAreTheProfilersAndTheSliceStepsAreTheMeasuredOnes) {
  const InklingConfig slice = load_inkling_config(kSrc + "/configs/slice.json");
  const LayoutSpec one;
  const ComputeRates rates = h200_compute_rates();
  const RankCompute gb1 = rank_compute(slice, one, 0, slice_workload(1), OptimizerMemory{}, rates);
  // op_profile_gb1.json: linear_* 2.216e13 FLOPs each (forward, backward input, backward weight), the
  // grouped ones 7.422e12 each, attention 7.496e11 forward and 1.874e12 backward.
  const double profiler = 3 * 2.216e13 + 3 * 7.422e12 + 7.496e11 + 1.874e12;
  EXPECT_NEAR(gb1.flops_per_micro_batch, profiler, 1e-3 * profiler);
  const double step1 = gb1.forward_s + gb1.backward_s + gb1.optimizer_s;
  const RankCompute gb8 = rank_compute(slice, one, 0, slice_workload(8), OptimizerMemory{}, rates);
  const double step8 = 8 * (gb8.forward_s + gb8.backward_s) + gb8.optimizer_s;
  std::printf("slice on one H200, modelled: gb1 %.1f ms (measured 211.3), gb8 %.1f ms (measured 1411.0)\n", 1e3 * step1,
              1e3 * step8);
  // The deterministic attention backward (after v6) adds about 1.4% to the 8-row step.
  EXPECT_NEAR(step8, 1.4110, 0.03 * 1.4110);
  EXPECT_NEAR(step1, 0.2113, 0.05 * 0.2113);
  // The optimizer: AdamW over 4.59e9 elements, about 35 ms plus the norm's pass (measured 35.1 + 4.4 ms).
  EXPECT_NEAR(gb1.optimizer_s, 0.0395, 0.1 * 0.0395);
}

TEST(ComputeModel, OffloadAddsHostWorkAndBf16MomentsSaveDeviceBytes) {
  const InklingConfig slice = load_inkling_config(kSrc + "/configs/slice.json");
  const LayoutSpec one;
  const ComputeRates rates = h200_compute_rates();
  OptimizerMemory device, half, bf16, half_bf16;
  half.cpu_offload = true, half.offload_fraction = 0.5, half.overlap_d2h_h2d = true;
  bf16.exp_avg = bf16.exp_avg_sq = DType::BF16;
  half_bf16 = half;
  half_bf16.exp_avg = half_bf16.exp_avg_sq = DType::BF16;
  const double d = rank_compute(slice, one, 0, slice_workload(1), device, rates).optimizer_s;
  const RankCompute hc = rank_compute(slice, one, 0, slice_workload(1), half, rates);
  const double h = hc.optimizer_s;
  const double b = rank_compute(slice, one, 0, slice_workload(1), bf16, rates).optimizer_s;
  EXPECT_GT(h, 10 * d) << "half the state through the host at 3.3 G elements/s against the device's 3.9 TB/s";
  EXPECT_LT(b, d);
  // 2.3e9 elements through the host at 3.30 G elements/s. With the overlap their gradients' copy down at 55 GB/s
  // (0.17 s) is pipelined under the host's update (0.70 s): only the first stretch's copy down and the last
  // stretch's copy up (2^24 elements each) are left beside it. Without it, the copy down comes first.
  EXPECT_NEAR(h, 4.59e9 / 2 / 3.30e9 + (4 + 2) * 16777216 / 55e9, 0.02 * h);
  OptimizerMemory serial = half;
  serial.overlap_d2h_h2d = false;
  const double hs = rank_compute(slice, one, 0, slice_workload(1), serial, rates).optimizer_s;
  EXPECT_NEAR(hs, 4.59e9 / 2 * (1 / 3.30e9 + 4 / 55e9), 0.05 * hs);
  EXPECT_GT(hs - h, 0.15) << "the pipelined copy down hides most of its 0.17 s";
  // The host's update runs at one element rate whatever the moments' dtype (measured on the H200 host:
  // 3.303 G/s fp32, 3.255 G/s bf16), so bf16 moments change the device's part only.
  auto host_part = [](const RankCompute& rc) {
    for (const RankCompute::Part& p : rc.parts)
      if (p.what == "host AdamW and copies (offload)") return p.seconds;
    return -1.0;
  };
  const RankCompute hb = rank_compute(slice, one, 0, slice_workload(1), half_bf16, rates);
  EXPECT_GT(host_part(hc), 0);
  EXPECT_DOUBLE_EQ(host_part(hb), host_part(hc));
}

// The grouped GEMMs' rate by rows per local expert (grouped_bench on one H200): the table's points
// exactly, log-linear between them, the rate's own above the last, proportional below the first.
TEST(ComputeModel, GroupedRateFallsWithFewerRowsPerExpert) {
  const ComputeRates rates = h200_compute_rates();
  EXPECT_DOUBLE_EQ(grouped_rate_factor(rates, 1536), 1.0);
  EXPECT_DOUBLE_EQ(grouped_rate_factor(rates, 4096), 1.0);
  EXPECT_NEAR(grouped_rate_factor(rates, 384), 0.534, 1e-12);
  EXPECT_NEAR(grouped_rate_factor(rates, 96), 0.167, 1e-12);
  EXPECT_NEAR(grouped_rate_factor(rates, 48), 0.167 / 2, 1e-12);
  const double mid = grouped_rate_factor(rates, std::sqrt(384.0 * 768.0));  // halfway in log rows
  EXPECT_NEAR(mid, std::sqrt(0.534 * 0.784), 1e-12);
  ComputeRates flat = rates;
  flat.grouped_rate_by_rows.clear();
  EXPECT_DOUBLE_EQ(grouped_rate_factor(flat, 96), 1.0);

  // The seed's TP4 SP EP8 rank of a middle stage (10 MoE layers) routes 8,192 / 4 x 6 x 8 / 256 = 384 rows to each
  // of its 32 experts: its expert GEMMs take 1 / 0.534 of the time the flat rate gives; nothing else changes.
  const InklingConfig small = load_inkling_config(kSrc + "/tests/fixtures/configs/inkling-small-hf.json");
  LayoutSpec seed;
  seed.tp = 4, seed.sequence_parallel = true, seed.pp = 4, seed.ep = 8, seed.dp = 2;
  seed.pp_layers = {12, 10, 10, 10};
  LedgerWorkload w = slice_workload(128);
  const RankCompute with = rank_compute(small, seed, 8, w, OptimizerMemory{}, rates);
  const RankCompute without = rank_compute(small, seed, 8, w, OptimizerMemory{}, flat);
  auto part = [](const RankCompute& r, const std::string& what) {
    for (const RankCompute::Part& p : r.parts)
      if (p.what == what) return p.seconds;
    ADD_FAILURE() << "no part " << what;
    return 0.0;
  };
  EXPECT_NEAR(part(with, "expert GEMMs"), part(without, "expert GEMMs") / 0.534, 1e-9);
  EXPECT_DOUBLE_EQ(part(with, "dense GEMMs"), part(without, "dense GEMMs"));
  EXPECT_DOUBLE_EQ(with.flops_per_micro_batch, without.flops_per_micro_batch);
}

RecomputeOptions full(RecomputeOptions::Method method, int64_t layers) {
  RecomputeOptions o;
  o.granularity = RecomputeOptions::Granularity::Full;
  o.method = method;
  o.num_layers = layers;
  return o;
}

double part_or_zero(const RankCompute& r, const std::string& what) {
  for (const RankCompute::Part& p : r.parts)
    if (p.what == what) return p.seconds;
  return 0;
}

// Recompute (model/recompute.h) adds to the backward the forward of exactly the recomputed layers: on the
// seed's middle stage (layers 12-21, all MoE, layer 17 global), block N adds layer 12 + N - 1's forward
// (the local layers alike, the global one more), block 10 and uniform 1 the stage's whole forward; the
// forward, the optimizer and the FLOPs (the model's useful work) stay.
TEST(ComputeModel, RecomputeAddsTheRecomputedLayersForwardToTheBackward) {
  const InklingConfig small = load_inkling_config(kSrc + "/tests/fixtures/configs/inkling-small-hf.json");
  LayoutSpec seed;
  seed.tp = 4, seed.sequence_parallel = true, seed.pp = 4, seed.ep = 8, seed.dp = 2;
  seed.pp_layers = {12, 10, 10, 10};
  const LedgerWorkload w = slice_workload(128);
  const ComputeRates rates = h200_compute_rates();
  const int middle = 8;  // stage 1's first rank
  using Method = RecomputeOptions::Method;
  const RankCompute none = rank_compute(small, seed, middle, w, OptimizerMemory{}, rates);
  EXPECT_EQ(part_or_zero(none, "recompute (forward again)"), 0);
  const RankCompute every = rank_compute(small, seed, middle, w, OptimizerMemory{}, rates, full(Method::Uniform, 1));
  EXPECT_NEAR(every.backward_s - none.backward_s, none.forward_s, 1e-12) << "a middle stage's forward is its layers'";
  EXPECT_DOUBLE_EQ(every.forward_s, none.forward_s);
  EXPECT_DOUBLE_EQ(every.optimizer_s, none.optimizer_s);
  EXPECT_DOUBLE_EQ(every.flops_per_micro_batch, none.flops_per_micro_batch);
  EXPECT_NEAR(part_or_zero(every, "recompute (forward again)"), 64 * none.forward_s, 1e-9) << "64 micro-batches";
  for (const RecomputeOptions& all : {full(Method::Block, 10), full(Method::Block, 12), full(Method::Uniform, 3)})
    EXPECT_NEAR(rank_compute(small, seed, middle, w, OptimizerMemory{}, rates, all).backward_s, every.backward_s, 1e-12)
        << all.describe() << " recomputes every layer of the stage";
  // Block N against block N - 1: layer 12 + N - 1's forward alone.
  std::vector<double> layer_s;
  double previous = none.backward_s;
  for (int64_t n = 1; n <= 10; ++n) {
    const double b =
        rank_compute(small, seed, middle, w, OptimizerMemory{}, rates, full(Method::Block, n)).backward_s;
    layer_s.push_back(b - previous);
    previous = b;
  }
  double sum = 0;
  for (size_t i = 0; i < layer_s.size(); ++i) {
    sum += layer_s[i];
    const bool global = !small.is_local(12 + static_cast<int64_t>(i));
    EXPECT_EQ(global, i == 5);
    if (global)
      EXPECT_GT(layer_s[i], 1.05 * layer_s[0]) << "the global layer's causal attention over the whole row";
    else
      EXPECT_NEAR(layer_s[i], layer_s[0], 1e-12) << "layer " << 12 + i << ": every local MoE layer costs the same";
  }
  EXPECT_NEAR(sum, none.forward_s, 1e-12);
  // Stage 0 (layers 0-11): its layers 0 and 1 are dense (alike, and not a MoE layer's cost); its layer 2, a local
  // MoE layer, costs what the middle stage's do.
  auto first_stage = [&](int64_t n) {
    return rank_compute(small, seed, 0, w, OptimizerMemory{}, rates, full(Method::Block, n)).backward_s;
  };
  const double dense0 = first_stage(1) - rank_compute(small, seed, 0, w, OptimizerMemory{}, rates).backward_s;
  EXPECT_NEAR(first_stage(2) - first_stage(1), dense0, 1e-12);
  EXPECT_GT(std::abs(dense0 - layer_s[0]), 1e-2 * layer_s[0]);
  EXPECT_NEAR(first_stage(3) - first_stage(2), layer_s[0], 1e-12);
}

TEST(ComputeModel, AttentionPairsCountTheWindow) {
  EXPECT_DOUBLE_EQ(attention_pairs(8, 0), 36);   // causal: 8 x 9 / 2
  EXPECT_DOUBLE_EQ(attention_pairs(8, 3), 21);   // 1 + 2 + 3 x 6
  EXPECT_DOUBLE_EQ(attention_pairs(8, 16), 36);  // a window past the row is causal
}

}  // namespace
}  // namespace quill::tune
