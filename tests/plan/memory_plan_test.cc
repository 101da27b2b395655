// The memory plan against the allocator's counters: on the CPU, the activation plan is the model's
// allocation sequence, so the plan's allocator peak of a training step equals the measured one
// byte for byte (one rank, both tiny configs, rows shorter and longer than the LM head's chunk);
// the resident part equals what placement and the optimizer allocate; the 1F1B in-flight counts;
// the slice's measured H200 peak; the refusal message and its suggestions.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/error.h"
#include "model/inkling_model.h"
#include "model/param_placement.h"
#include "model/params.h"
#include "optim/adamw.h"
#include "plan/memory_plan.h"
#include "plan/plan_report.h"
#include "tensor/tracking_allocator.h"
#include "util/test_util.h"

namespace {

using quill::plan::MemoryPlan;
using quill::plan::PlanRequest;
using quill::plan::Use;

struct Measured {
  int64_t resident = 0, peak = 0;
};

// One optimizer step of `rows` rows of T tokens on the CPU reference, every tensor through a
// counting allocator: what is live before the step, and the most live during it.
Measured measure_cpu_step(const quill::InklingConfig& c, int64_t T, int rows, const std::vector<std::string>& freeze) {
  quill::TrackingAllocator alloc;
  quill::DeviceContext ctx = quill::DeviceContext::cpu();
  ctx.allocator = &alloc;
  quill::ParamTable params = quill::ParamTable::for_config(c);
  params.init_random(7, c.initializer_range);
  params.freeze(freeze);
  quill::place_params(params, ctx);
  quill::InklingModel model(c, params, ctx);
  quill::AdamW optimizer(params, quill::AdamWConfig{}, ctx);
  std::vector<int32_t> tokens(static_cast<size_t>(T));
  std::vector<uint8_t> mask(static_cast<size_t>(T), 1);
  for (int64_t t = 0; t < T; ++t) tokens[static_cast<size_t>(t)] = static_cast<int32_t>((t * 7919 + 13) % c.unpadded_vocab_size);
  Measured m;
  m.resident = alloc.in_use();
  alloc.reset_peak();
  quill::zero_grads(params, ctx);
  for (int r = 0; r < rows; ++r) model.train_row(tokens.data(), mask.data(), T, 1.0 / static_cast<double>(rows * T));
  quill::settle_grads(params, ctx);
  optimizer.step(1e-3);
  m.peak = alloc.peak();
  return m;
}

PlanRequest cpu_request(const quill::InklingConfig& c, int64_t T, int64_t global_batch, std::vector<std::string> freeze) {
  PlanRequest q;
  q.config = c;
  q.row_tokens = T;
  q.global_batch = global_batch;
  q.device = quill::Device::CPU;
  q.freeze = std::move(freeze);
  return q;
}

TEST(MemoryPlan, EqualsTheCpuAllocatorPeakOfAStep) {
  const std::string src = QUILL_SOURCE_DIR;
  for (const std::string& config : {src + "/configs/tiny.json", src + "/tests/fixtures/configs/tiny6.json"}) {
    const quill::InklingConfig c = quill::load_inkling_config(config);
    // 1,500 tokens: two LM-head chunks (1,024 rows and 476) on the CPU.
    for (int64_t T : {64, 1500}) {
      std::vector<std::vector<std::string>> frozen_sets = {quill::miles_frozen_patterns()};
      if (T == 64) {  // every frozen parameter's gradient scratch: none frozen, the MLPs and LM head, r's projection
        frozen_sets.push_back({});
        frozen_sets.push_back({"*.mlp.*", "model.llm.unembed.weight"});
        // A frozen projection: the attention backward's four GEMMs each way instead of the stacked ones.
        frozen_sets.push_back({"*.attn.wr_du.weight"});
      }
      for (const std::vector<std::string>& freeze : frozen_sets) {
        SCOPED_TRACE(config + " T=" + std::to_string(T) + " frozen patterns " + std::to_string(freeze.size()));
        const Measured m = measure_cpu_step(c, T, 2, freeze);
        const MemoryPlan plan = quill::plan::plan_memory(cpu_request(c, T, 2, freeze));
        ASSERT_EQ(plan.stages.size(), 1u);
        const quill::plan::StagePlan& s = plan.stages[0];
        EXPECT_EQ(s.resident(), m.resident);
        EXPECT_EQ(s.allocator_peak(), m.peak);
        EXPECT_GT(s.at_peak[static_cast<size_t>(Use::Saved)], 0);
        EXPECT_EQ(s.in_flight, 1);
      }
    }
  }
}

TEST(MemoryPlan, OneFOneBKeepsAtMostPpMinusStageMicroBatches) {
  const quill::InklingConfig c = quill::load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/tests/fixtures/configs/tiny6.json");
  PlanRequest q = cpu_request(c, 256, 8, {});
  q.layout.pp = 3;
  const MemoryPlan plan = quill::plan::plan_memory(q);
  ASSERT_EQ(plan.stages.size(), 3u);
  for (const quill::plan::StagePlan& s : plan.stages) {
    SCOPED_TRACE(s.stage);
    EXPECT_EQ(s.in_flight, 3 - s.stage);
    const int64_t saved = s.at_peak[static_cast<size_t>(Use::Saved)], one = s.activations_per_micro_batch;
    // At the peak the stage holds its in-flight micro-batches (the newest possibly not complete).
    EXPECT_LE(saved, s.in_flight * one);
    EXPECT_GT(saved, (s.in_flight - 1) * one);
    // The last stage peaks in its head, holding no message; the others hold a received one.
    if (s.stage + 1 < 3) {
      EXPECT_GT(s.at_peak[static_cast<size_t>(Use::Pipeline)], 0);
    }
  }
}

// --overlap-moe-expert-parallel-comm (the combined 1F1B of one stage) keeps two micro-batches' saved
// activations at the peak; with a pipeline it is refused, naming the flags.
TEST(MemoryPlan, CombinedOneFOneBKeepsTwoMicroBatchesAndNeedsOneStage) {
  const quill::InklingConfig c = quill::load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/tests/fixtures/configs/tiny6.json");
  PlanRequest q = cpu_request(c, 256, 8, {});
  q.layout.dp = 2;
  q.layout.ep = 2;
  const MemoryPlan plain = quill::plan::plan_memory(q);
  q.overlap_moe_ep_comm = true;
  const MemoryPlan combined = quill::plan::plan_memory(q);
  const quill::plan::StagePlan &a = plain.stages.at(0), &b = combined.stages.at(0);
  EXPECT_EQ(a.in_flight, 1);
  EXPECT_EQ(b.in_flight, 2);
  const int64_t one = b.activations_per_micro_batch;
  EXPECT_GT(b.at_peak[static_cast<size_t>(Use::Saved)], one);
  EXPECT_LE(b.at_peak[static_cast<size_t>(Use::Saved)], 2 * one);
  EXPECT_GT(b.allocator_peak(), a.allocator_peak());
  q.layout.pp = 2;
  const std::string what = quill::test::error_of([&] { quill::plan::plan_memory(q); });
  EXPECT_NE(what.find("--overlap-moe-expert-parallel-comm needs --pipeline-model-parallel-size 1 (got 2)"),
            std::string::npos) << what;
}

TEST(MemoryPlan, ShardsTheOptimizerStateOverDataParallelRanksAndOffloadsAFraction) {
  const quill::InklingConfig c = quill::load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/slice.json");
  PlanRequest q;
  q.config = c;
  q.row_tokens = 8192;
  const MemoryPlan one = quill::plan::plan_memory(q);
  q.layout.dp = 2;
  q.global_batch = 2;
  const MemoryPlan two = quill::plan::plan_memory(q);
  EXPECT_EQ(two.stages[0].compute_weights, one.stages[0].compute_weights);
  EXPECT_NEAR(static_cast<double>(two.stages[0].moments), one.stages[0].moments / 2.0, 64.0);
  EXPECT_NEAR(static_cast<double>(two.stages[0].master_weights), one.stages[0].master_weights / 2.0, 64.0);
  q.optimizer.cpu_offload = true;
  q.optimizer.offload_fraction = 0.7;
  const MemoryPlan off = quill::plan::plan_memory(q);
  // Each bucket offloads the head of its shard, rounded to 64 elements (model/offload_split.h).
  const double shard = two.stages[0].moments / 8.0, bf16_shard = two.stages[0].master_weights / 4.0;
  EXPECT_NEAR(static_cast<double>(off.stages[0].moments), 0.3 * two.stages[0].moments, 64 * 8 * 4);
  EXPECT_NEAR(static_cast<double>(off.stages[0].master_weights), 0.3 * two.stages[0].master_weights, 64 * 4 * 4);
  // Host: the fp32 master, an fp32 gradient copy, both moments, and a bf16 staging copy for bf16 buckets.
  EXPECT_NEAR(static_cast<double>(off.stages[0].host_optimizer), 0.7 * (16 * shard + 2 * bf16_shard), 64 * 18 * 4);
  EXPECT_EQ(off.pinned_host_per_node.size(), 1u);
  EXPECT_EQ(off.pinned_host_per_node[0], 2 * off.stages[0].host_optimizer);
  q.optimizer.exp_avg = q.optimizer.exp_avg_sq = quill::DType::BF16;
  EXPECT_NEAR(static_cast<double>(quill::plan::plan_memory(q).stages[0].moments), off.stages[0].moments / 2.0, 1.0);
}

// bench/results/2026-11-30-slice-v6 (and 2026-12-01-runtime/final): quill train --device cuda on the slice,
// 8,192-token rows, one row per step, peak_gpu_bytes 98,616,426,912 on an H200 (91.8 GiB; the same with 8 rows).
TEST(MemoryPlan, PredictsTheSlicePeakMeasuredOnAnH200WithinTenPercent) {
  const quill::InklingConfig c = quill::load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/slice.json");
  for (int64_t rows : {1, 8}) {
    PlanRequest q;
    q.config = c;
    q.row_tokens = 8192;
    q.global_batch = rows;
    q.freeze = quill::miles_frozen_patterns();
    const MemoryPlan plan = quill::plan::plan_memory(q);
    const double predicted = static_cast<double>(plan.stages[0].allocator_peak()), measured = 98616426912.0;
    std::printf("slice, %lld rows per step: predicted %.0f bytes (%.3f GiB), measured %.0f (%.3f GiB): %+.4f%%\n",
                static_cast<long long>(rows), predicted, predicted / (1 << 30), measured, measured / (1 << 30),
                100 * (predicted - measured) / measured);
    EXPECT_LT(std::fabs(predicted - measured) / measured, 0.10);
  }
}

TEST(MemoryPlan, RefusalNamesTheLargestCategoriesAndWhatWouldFit) {
  const quill::InklingConfig c = quill::load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/slice.json");
  PlanRequest q;
  q.config = c;
  q.row_tokens = 8192;
  const MemoryPlan plan = quill::plan::plan_memory(q);
  const int64_t device = plan.stages[0].device_total() - (int64_t{20} << 30);  // 20 GiB short
  const quill::plan::FitVerdict v = quill::plan::check_fit(plan, device);
  ASSERT_FALSE(v.fits);
  for (const char* needle : {"does not fit", "Adam moments", "--optimizer-offload-fraction", "--exp-avg-dtype bf16",
                             "--pp 2", "rows of 4096 tokens"})
    EXPECT_NE(v.message.find(needle), std::string::npos) << needle << " in:\n" << v.message;
  EXPECT_TRUE(quill::plan::check_fit(plan, plan.stages[0].device_total()).fits);
}

TEST(MemoryPlan, RefusesLayoutsThatDoNotDivideNamingTheFlag) {
  const quill::InklingConfig c = quill::load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/tiny.json");
  PlanRequest q = cpu_request(c, 64, 4, {});
  q.layout.tp = 3;
  q.layout.dp = 1;
  q.global_batch = 3;
  EXPECT_THROW(quill::plan::plan_memory(q), quill::Error);
  q = cpu_request(c, 64, 3, {});
  q.layout.dp = 2;
  try {
    quill::plan::plan_memory(q);
    ADD_FAILURE() << "no error";
  } catch (const quill::Error& e) {
    EXPECT_NE(std::string(e.what()).find("--global-batch 3"), std::string::npos) << e.what();
  }
}

}  // namespace

// The node check of `quill train`: at startup the host holds, per rank, first the fp32 copy of its weights
// and the offloaded masters placement pins, then (the copy freed) the whole pinned optimizer state; the
// larger, summed over the node's ranks, must leave 10% of the host. Measured (bench/results/
// 2026-12-05-h200-checks, seed-projection first-offload): the seed's rank 0 with offload 0.7 started on
// a 125 GiB host, which "pinned state + the whole weights' copy" (130 GiB) would have refused.
TEST(MemoryPlan, AStartupNeedingMoreThanNinetyPercentOfTheNodesHostMemoryIsRefused) {
  const quill::InklingConfig c = quill::load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/configs/slice.json");
  PlanRequest q;
  q.config = c;
  q.row_tokens = 8192;
  q.layout.dp = 2;
  q.global_batch = 2;
  q.optimizer.cpu_offload = true;
  q.optimizer.offload_fraction = 0.7;
  const MemoryPlan plan = quill::plan::plan_memory(q);
  ASSERT_EQ(plan.stage_of_rank.size(), 2u);
  const quill::plan::StagePlan& s = plan.stages[0];
  EXPECT_EQ(s.host_weights_at_load, 4 * s.parameters);  // the fp32 host values of every parameter held
  // The masters are 4 of the 16 (fp32 buckets) or 18 (bf16 buckets: + a staging copy) host bytes per offloaded element.
  EXPECT_GT(s.host_masters, s.host_optimizer * 4 / 18);
  EXPECT_LE(s.host_masters, s.host_optimizer * 4 / 16);
  EXPECT_EQ(s.host_startup_peak(), std::max(s.host_weights_at_load + s.host_masters, s.host_optimizer));
  EXPECT_EQ(plan.stage_of_rank[0], 0);
  EXPECT_EQ(plan.startup_host_per_node[0], 2 * s.host_startup_peak());
  const int64_t both = plan.startup_host_per_node[0];
  // Exactly at 90% of the host: fits; a little less host: refused, naming both phases and the fixes.
  const auto host_for = [](int64_t need) { return static_cast<int64_t>(std::ceil(need / quill::plan::kHostShare)); };
  EXPECT_TRUE(quill::plan::check_host_fit(plan, {0, 1}, host_for(both) + 16).fits);
  const quill::plan::FitVerdict v = quill::plan::check_host_fit(plan, {0, 1}, host_for(both) - 16);
  EXPECT_FALSE(v.fits);
  EXPECT_NE(v.message.find("2 ranks need up to " + quill::plan::format_bytes(both)), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("once placed the pinned optimizer state, " + quill::plan::format_bytes(2 * s.host_optimizer)),
            std::string::npos)
      << v.message;
  EXPECT_NE(v.message.find("--optimizer-offload-fraction (now 0.70)"), std::string::npos) << v.message;
  // One rank alone on the same host fits; no host figure: not checked.
  EXPECT_TRUE(quill::plan::check_host_fit(plan, {1}, host_for(both) - 16).fits);
  EXPECT_TRUE(quill::plan::check_host_fit(plan, {0, 1}, 0).fits);
  // Node by node (both ranks on node 0 of 8 GPUs): the same verdict.
  const std::vector<quill::plan::FitVerdict> nodes = quill::plan::check_nodes_host_fit(plan, host_for(both) - 16);
  ASSERT_EQ(nodes.size(), 1u);
  EXPECT_EQ(nodes[0].message, v.message);
}

namespace {

// Inkling-Small in the seed's layout (TP4 SP PP4 12/10/10/10 EP8 DP2), 8,192-token rows, 128 rows per step.
PlanRequest seed_request() {
  PlanRequest q;
  q.config =
      quill::load_inkling_config(std::string(QUILL_SOURCE_DIR) + "/tests/fixtures/configs/inkling-small-hf.json");
  q.row_tokens = 8192;
  q.global_batch = 128;
  q.layout.tp = 4;
  q.layout.sequence_parallel = true;
  q.layout.pp = 4;
  q.layout.pp_layers = {12, 10, 10, 10};
  q.layout.ep = 8;
  q.layout.dp = 2;
  return q;
}

}  // namespace

// The seed's first-stage rank alone, as the simulated-rank projection ran it on one H200 (125 GiB host).
TEST(MemoryPlan, TheSeedsOffloadedFirstRankFitsTheHostItRanOn) {
  PlanRequest q = seed_request();
  q.optimizer.cpu_offload = true;
  q.optimizer.offload_fraction = 0.7;
  const MemoryPlan plan = quill::plan::plan_memory(q);
  EXPECT_TRUE(quill::plan::check_host_fit(plan, {0}, int64_t{125} << 30).fits);
  EXPECT_EQ(plan.stages[0].host_startup_peak(), plan.stages[0].host_optimizer);  // the pinned state is the larger
}

// The seed's layout with bf16 moments and no offload does not fit an H200; the refusal names selective
// recompute first (it repeats no GEMM), at the bytes its own plan gives, then the fewest block-recomputed layers.
TEST(MemoryPlan, TheSeedsRefusalWithoutOffloadNamesSelectiveRecomputeFirst) {
  PlanRequest q = seed_request();
  q.optimizer.exp_avg = q.optimizer.exp_avg_sq = quill::DType::BF16;
  const quill::plan::FitVerdict v = quill::plan::check_fit(quill::plan::plan_memory(q), quill::plan::kH200MemoryBytes);
  ASSERT_FALSE(v.fits);
  PlanRequest selective = q;
  selective.recompute = quill::parse_recompute("selective", "", 1, {"moe_act", "layernorm"});
  const MemoryPlan fits = quill::plan::plan_memory(selective);
  EXPECT_TRUE(quill::plan::check_fit(fits, quill::plan::kH200MemoryBytes).fits);
  const std::string line = "--recompute-granularity selective --recompute-modules moe_act layernorm: fits (" +
                           quill::plan::format_bytes(fits.largest().device_total());
  const size_t at = v.message.find(line), block = v.message.find("--recompute-method block");
  EXPECT_NE(at, std::string::npos) << line << " in:\n" << v.message;
  EXPECT_LT(at, block) << v.message;
}
