// The compute time of one rank per micro-batch and of its optimizer step, MODELLED (docs/tune.md): the
// FLOPs of the rank's share of its stage (the same counts as quill's CUDA op profiler,
// ops/cuda/profiling.cc: GEMMs 2MNK, grouped GEMMs over the routed rows, attention 4 x (query, key)
// pairs x heads x head dim forward and 2.5 times that backward) divided by rates quill measured on
// one H200 for each kind of op (the slice's per-op table), the memory-bound ops by their measured
// time per token and layer, and the optimizer by the bytes it moves at the measured bandwidths. No
// kernel runs; `quill train --simulate-rank` measures what this estimates.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/config.h"
#include "model/recompute.h"
#include "optim/optimizer_memory.h"
#include "parallel/layout_spec.h"
#include "tune/ledger_model.h"

namespace quill::tune {

// Achieved rates, each with where it was measured (docs/tune.md lists them with their sources).
struct ComputeRates {
  double dense_gemm_tflops = 0;     // linear_forward / backward_input / backward_weight, together
  double grouped_gemm_tflops = 0;   // the routed experts' grouped GEMMs, together, at the slice's rows per expert
  // The grouped GEMMs' rate relative to grouped_gemm_tflops by rows per local expert, (rows, factor) in
  // ascending rows, the last point the rate's own (factor 1; the slice: 8,192 tokens x top 6 over 32
  // experts = 1,536): fewer rows per expert run the same FLOPs slower (grouped_rate_factor
  // interpolates; empty: one rate at any rows per expert).
  std::vector<std::pair<double, double>> grouped_rate_by_rows;
  double attention_global_fwd_tflops = 0, attention_global_bwd_tflops = 0;  // causal (profiler's count)
  double attention_local_fwd_tflops = 0, attention_local_bwd_tflops = 0;    // sliding window
  double loss_gbps = 0;             // the cross entropy over the logits (bytes: 4 per logit)
  // The passes' memory-bound ops (norms, residual adds, convolutions, SwiGLU, the MoE permutations, the
  // router, launch gaps), measured per (row, layer) at the reference size: scaled by T x D. The sequence
  // region's share runs on T/tp rows under SP (replicated without); the split region's on 1/tp.
  double region_ms_per_row_layer = 0, split_ms_per_row_layer = 0, gaps_ms_per_row_layer = 0;
  int64_t reference_tokens = 8192, reference_hidden = 4096;
  double adamw_gbps = 0;            // the device AdamW (bytes read and written per element: see .cc)
  double sum_squares_gbps = 0;      // the gradient norm's pass over the shard
  double host_adamw_gelements_per_s = 0;  // the host AdamW, G elements updated per second per rank
  double pcie_gbps = 0;             // pinned host <-> device copies, each way
  std::string source;
};

// Measured on one H200 by quill (docs/tune.md): the slice's per-op table at 8 rows per step
// (bench/results/2026-11-30-slice-v6/op_profile_gb8.json) with the deterministic attention backward's
// cost (bench/results/2026-12-02-determinism), the host AdamW of bench/results/2026-12-01-cpu-adamw,
// the pinned copies of docs/performance.md.
ComputeRates h200_compute_rates();

// grouped_rate_by_rows at `rows` per local expert: log-linear between the table's points, 1 above its
// last, proportional to rows below its first (a GEMM that small is bound by its fixed costs).
double grouped_rate_factor(const ComputeRates& rates, double rows);

// One rank's modelled compute. Per step: parts by kind, for the report's "bounded by".
struct RankCompute {
  double forward_s = 0, backward_s = 0;  // per micro-batch
  double optimizer_s = 0;                // per step
  double flops_per_micro_batch = 0;      // forward + backward, every GEMM and the attention (no recompute)
  struct Part {
    std::string what;
    double seconds = 0;  // per step
  };
  std::vector<Part> parts;
};

// `world_rank`'s compute for `workload` (device CUDA: the GPU's dtypes) with `optimizer`'s offload and
// moment dtypes. Under expert parallelism the routed rows are balanced (each rank computes T/tp x top_k
// rows per MoE layer, whatever ep is). With `recompute`, each recomputed layer of the rank's stage
// (recompute_groups) adds its forward to backward_s and a part "recompute (forward again)"; the FLOPs
// stay the model's.
RankCompute rank_compute(const InklingConfig& config, const LayoutSpec& spec, int world_rank,
                         const LedgerWorkload& workload, const OptimizerMemory& optimizer, const ComputeRates& rates,
                         const RecomputeOptions& recompute = {});

// (query, key) pairs of a causal attention over T positions with window W (0: none), as the profiler counts.
double attention_pairs(int64_t T, int64_t window);

}  // namespace quill::tune
