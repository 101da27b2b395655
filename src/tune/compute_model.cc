#include "tune/compute_model.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "model/offload_split.h"
#include "parallel/grid.h"
#include "parallel/layout.h"
#include "plan/param_memory.h"

namespace quill::tune {

ComputeRates h200_compute_rates() {
  ComputeRates r;
  // bench/results/2026-11-30-slice-v6/op_profile_gb8.json (quill 508d374, one H200, the slice at 8 rows of
  // 8,192 tokens, 50.9% MFU): FLOPs and milliseconds of each op over one step.
  // linear_*: 3 x 1.772e14 FLOPs in 231.84 + 237.76 + 245.32 ms.
  r.dense_gemm_tflops = 3 * 1.772e14 / (714.92e-3) / 1e12;  // 743.6
  // grouped_linear_*: 3 x 5.937e13 FLOPs in 95.15 + 92.22 + 120.28 ms.
  r.grouped_gemm_tflops = 3 * 5.937e13 / (307.65e-3) / 1e12;  // 578.9
  // By rows per expert (bench/results/2026-12-04-pending-checks, grouped_bench on one H200, balanced counts,
  // hidden 4,096, expert FFN 2,048): the six GEMMs of a pass (forward gate/up and down, the input
  // gradients, the weight gradients; gate/up twice the FLOPs of down) give an effective rate of
  // 627.0 TFLOP/s at 1,536 rows per expert (32 experts), 491.6 at 768 (64), 335.1 at 384 (32 experts; 128: 333.7),
  // 195.6 at 192 (64), 104.6 at 96 (32); relative to 1,536: 0.784, 0.534, 0.312, 0.167. The weight gradients
  // lose most (498 -> 191 TFLOP/s at 384 rows). The seed's TP4 SP EP8 rank runs 32 experts x 384 rows.
  r.grouped_rate_by_rows = {{96, 0.167}, {192, 0.312}, {384, 0.534}, {768, 0.784}, {1536, 1.0}};
  // attention by layer type (the step's top-25 table, slice-bench.txt): the global layer 140.9 forward,
  // 93.7 backward; the three local layers (window 512) 65.2 and 47.2 TFLOP/s. Since then the backward
  // adds dQ in a fixed order (bench/results/2026-12-02-determinism: +9.4% global, +3.6% local).
  r.attention_global_fwd_tflops = 140.9;
  r.attention_global_bwd_tflops = 93.7 / 1.094;
  r.attention_local_fwd_tflops = 65.2;
  r.attention_local_bwd_tflops = 47.2 / 1.036;
  // cross_entropy_forward_backward: 5.27e10 bytes (4 per logit) in 11.55 ms.
  r.loss_gbps = 5.27e10 / 11.55e-3 / 1e9;  // 4563
  // The memory-bound ops of the passes over 8 rows x 4 layers: the sequence region's (rmsnorm, add_inplace,
  // short_conv, scale_by_scalar, embedding, zero, scale_inplace, convert, transfer) 39.65 ms; the split
  // region's (swiglu, moe_(un)permute, scale_rows, route plan, router, get/set_columns) 43.61 ms; the gaps
  // between ops (step 1420.59 ms on the stream, ops 1414.80 ms) 5.79 ms.
  r.region_ms_per_row_layer = 39.65 / 32;
  r.split_ms_per_row_layer = 43.61 / 32;
  r.gaps_ms_per_row_layer = 5.79 / 32;
  // adamw_update: 1.378e11 bytes in 35.21 ms; sum_squares: 1.837e10 bytes in 4.49 ms.
  r.adamw_gbps = 1.378e11 / 35.21e-3 / 1e9;       // 3914
  r.sum_squares_gbps = 1.837e10 / 4.49e-3 / 1e9;  // 4091
  // The host AdamW on the H200 machine's host, 16 threads (the cores each GPU of that machine has;
  // bench/results/2026-12-04-offload-h200, bench/cpu_adamw): 3.303 G elements/s with fp32 moments (99.1 GB/s of
  // state), 3.255 with bf16 ones (71.6 GB/s). Counted in elements: a later call on the same kind of host
  // (bench/results/2026-12-04-offload-overlap) ran 2.96 and 2.44 G elements/s, fp32 at the host's memcpy
  // bandwidth on every thread count, so the figure moves ~10% between hosts and bf16 moments are no faster.
  r.host_adamw_gelements_per_s = 3.30;
  // Pinned host <-> device copies on the H200 machine, each way (docs/performance.md).
  r.pcie_gbps = 55.0;
  r.source =
      "modelled from quill's own measurements on one H200: the slice's per-op rates at 8 rows per step "
      "(bench/results/2026-11-30-slice-v6: dense GEMMs 744, expert GEMMs 579, attention global 141/86, local "
      "65/46 TFLOP/s fwd/bwd with the deterministic backward's cost; expert GEMMs scaled by rows per local expert, "
      "0.534 at 384, grouped_bench: bench/results/2026-12-04-pending-checks), AdamW 3914 GB/s; host AdamW 3.30 G elements/s "
      "(16 threads of the H200 machine's host, bench/results/2026-12-04-offload-h200), pinned copies 55 GB/s";
  return r;
}

double grouped_rate_factor(const ComputeRates& rates, double rows) {
  const auto& t = rates.grouped_rate_by_rows;
  if (t.empty() || rows >= t.back().first) return 1.0;
  if (rows <= t.front().first) return t.front().second * std::max(rows, 1.0) / t.front().first;
  size_t i = 1;
  while (t[i].first < rows) ++i;
  const double f = std::log(rows / t[i - 1].first) / std::log(t[i].first / t[i - 1].first);
  return std::exp(std::log(t[i - 1].second) + f * (std::log(t[i].second) - std::log(t[i - 1].second)));
}

double attention_pairs(int64_t T, int64_t window) {
  const double t = static_cast<double>(T);
  const double w = window <= 0 || window >= T ? t : static_cast<double>(window);
  return w * (w + 1) / 2 + (t - w) * w;
}

namespace {

int64_t dtype_bytes(DType d) { return static_cast<int64_t>(dtype_size(d)); }

// One layer's forward on the rank per micro-batch: its GEMMs' FLOPs by kind (the rates differ) and its
// attention's seconds, forward and backward (the rates differ by layer type).
struct LayerWork {
  double dense = 0, grouped = 0;
  double attention_fwd_s = 0, attention_bwd_s = 0, attention_flops = 0;  // flops: forward and backward
};

LayerWork layer_work(const InklingConfig& c, int64_t i, int64_t row_tokens, double tp, const ComputeRates& rates) {
  const double T = static_cast<double>(row_tokens), D = static_cast<double>(c.hidden_size), Tc = T / tp;
  const double H = static_cast<double>(c.heads(i)) / tp, G = static_cast<double>(c.kv_heads(i)) / tp;
  const double d = static_cast<double>(c.layer_head_dim(i)), R = static_cast<double>(c.d_rel);
  LayerWork w;
  w.dense = 2 * T * D * (H * d + 2 * G * d + H * R) + 2 * T * H * d * D;  // q, k, v, relative; out
  const double core = 4 * attention_pairs(row_tokens, c.window(i)) * H * d;
  const bool local = c.is_local(i);
  const double fwd_tflops = local ? rates.attention_local_fwd_tflops : rates.attention_global_fwd_tflops;
  const double bwd_tflops = local ? rates.attention_local_bwd_tflops : rates.attention_global_bwd_tflops;
  w.attention_fwd_s = core / (fwd_tflops * 1e12);
  w.attention_bwd_s = 2.5 * core / (bwd_tflops * 1e12);
  w.attention_flops = 3.5 * core;
  if (!c.is_moe(i)) {
    const double F = static_cast<double>(c.dense_intermediate_size) / tp;
    w.dense += 2 * T * D * 2 * F + 2 * T * F * D;
  } else {
    const double E = static_cast<double>(c.n_routed_experts), S = static_cast<double>(c.n_shared_experts);
    const double F = static_cast<double>(c.moe_intermediate_size);
    w.dense += 2 * Tc * D * (E + S);                                           // the router's gate, on the rank's chunk
    w.grouped += 6 * Tc * static_cast<double>(c.num_experts_per_tok) * D * F;  // T/tp x top_k rows, w13 and w2
    w.dense += S * 6 * T * D * (F / tp);                                       // the shared experts over all positions
  }
  return w;
}

}  // namespace

RankCompute rank_compute(const InklingConfig& c, const LayoutSpec& spec, int rank, const LedgerWorkload& w,
                         const OptimizerMemory& opt, const ComputeRates& rates, const RecomputeOptions& recompute) {
  const Grid grid(spec.world(), spec);
  const GridCoords at = grid.coords(rank);
  const std::vector<int64_t> stages = resolve_stage_layers(spec, c.num_layers);
  int64_t first = 0;
  for (int s = 0; s < at.pp; ++s) first += stages[static_cast<size_t>(s)];
  const int64_t end = first + stages[static_cast<size_t>(at.pp)];
  QUILL_CHECK(w.global_batch % spec.dp == 0, "--global-batch {} does not divide over {} data-parallel ranks",
              w.global_batch, spec.dp);
  const int64_t m = w.global_batch / spec.dp;
  const double T = static_cast<double>(w.row_tokens), D = static_cast<double>(c.hidden_size);
  const double tp = spec.tp, Tc = T / tp;
  const bool sp = spec.sequence_parallel && spec.tp > 1;
  const bool last = at.pp == spec.pp - 1;

  // Per micro-batch, forward FLOPs by kind.
  std::vector<LayerWork> work;
  double dense = 0, grouped = 0, head = 0;
  double attn_s_fwd = 0, attn_s_bwd = 0, attn_flops = 0;
  for (int64_t i = first; i < end; ++i) {
    work.push_back(layer_work(c, i, w.row_tokens, tp, rates));
    const LayerWork& x = work.back();
    dense += x.dense, grouped += x.grouped;
    attn_s_fwd += x.attention_fwd_s, attn_s_bwd += x.attention_bwd_s, attn_flops += x.attention_flops;
  }
  if (last) head = 2 * T * D * static_cast<double>(c.vocab_size) / tp;
  // Balanced routing: the rank's T/tp x top_k rows of a MoE layer over its E/ep local experts.
  const double rows_per_expert = Tc * static_cast<double>(c.num_experts_per_tok) * spec.ep /
                                 static_cast<double>(std::max<int64_t>(1, c.n_routed_experts));
  const double grouped_tflops = rates.grouped_gemm_tflops * grouped_rate_factor(rates, rows_per_expert);
  const double dense_s = dense / (rates.dense_gemm_tflops * 1e12), grouped_s = grouped / (grouped_tflops * 1e12);
  const double head_s = head / (rates.dense_gemm_tflops * 1e12);
  const double loss_s = last ? T * static_cast<double>(c.vocab_size) / tp * 4 / (rates.loss_gbps * 1e9) : 0;
  const double layers = static_cast<double>(end - first);
  const double size = T * D / (static_cast<double>(rates.reference_tokens) * static_cast<double>(rates.reference_hidden));
  const double memory_s = layers * 1e-3 *
                          (size * (rates.region_ms_per_row_layer / (sp ? tp : 1.0) + rates.split_ms_per_row_layer / tp) +
                           rates.gaps_ms_per_row_layer);

  RankCompute out;
  // The GEMMs' backward is two GEMMs of the forward's size; the memory-bound ops split as measured
  // (about a third forward). The last stage's forward also runs the head's backward and the loss
  // (model/stage_model.cc: each chunk's logits gradient is consumed at once).
  out.forward_s = (dense_s + grouped_s) + attn_s_fwd + memory_s / 3 + 3 * head_s + loss_s;
  out.backward_s = 2 * (dense_s + grouped_s) + attn_s_bwd + 2 * memory_s / 3;
  // Recompute: a recomputed layer's forward runs again right before its backward (model/stage_model.cc),
  // each layer its own GEMMs and attention and an even share of the forward's memory-bound ops. Not in
  // flops_per_micro_batch: that is the model's useful work (the MFU counts 6N per token).
  double recompute_s = 0;
  for (const auto& [b, e] : recompute_groups(recompute, end - first))
    for (int64_t i = b; i < e; ++i) {
      const LayerWork& x = work[static_cast<size_t>(i)];
      recompute_s += x.dense / (rates.dense_gemm_tflops * 1e12) + x.grouped / (grouped_tflops * 1e12) +
                     x.attention_fwd_s + memory_s / 3 / layers;
    }
  // Selective recompute (model/recompute.h): elementwise passes made again in each layer's backward, at the
  // device AdamW's streaming rate (the nearest measured elementwise kernel): layernorm reads the residual rows
  // and writes the norm's output twice per layer, and a MoE layer converts its chunk to fp32 again; moe_act reads
  // the gate/up output and writes the SwiGLU output (routed rows T/tp x top_k; each shared expert over all T
  // rows, with its gamma-scaled copy read and written too). The gathers it adds are in the modelled ledger.
  if (recompute.selective()) {
    const double a = w.device == Device::CPU ? 4 : 2, Tseq = sp ? Tc : T;
    const double F = static_cast<double>(c.moe_intermediate_size), Fs = F / tp;
    const double R = Tc * static_cast<double>(c.num_experts_per_tok), S = static_cast<double>(c.n_shared_experts);
    double bytes = 0;
    for (int64_t i = first; i < end; ++i) {
      if (recompute.layernorm) bytes += 2 * 2 * Tseq * D * a + (c.is_moe(i) ? Tc * D * (a + 4) : 0);
      if (recompute.moe_act && c.is_moe(i)) bytes += R * 3 * F * a + S * T * 5 * Fs * a;
    }
    recompute_s += bytes / (rates.adamw_gbps * 1e9);
  }
  out.backward_s += recompute_s;
  out.flops_per_micro_batch = 3 * (dense + grouped + head) + attn_flops;
  const double md = static_cast<double>(m);
  out.parts = {{"dense GEMMs", 3 * dense_s * md},
               {"expert GEMMs", 3 * grouped_s * md},
               {"attention", (attn_s_fwd + attn_s_bwd) * md},
               {"memory-bound ops", memory_s * md}};
  if (recompute_s > 0)
    out.parts.push_back({recompute.selective() ? "recompute (selective)" : "recompute (forward again)", recompute_s * md});
  if (last) out.parts.push_back({"LM head and loss", (3 * head_s + loss_s) * md});

  // The optimizer step on the rank's shards (optim/adamw.cc): the device update of the part kept on the
  // device, the norm's pass, and under offload the copy down of the gradients, the host update and the
  // copy up of the weights (with --overlap-cpu-optimizer-d2h-h2d beside the device's update).
  const plan::RankParams params = plan::rank_params(c, grid, rank, stages, w.device, w.freeze);
  std::vector<int64_t> shards;
  for (const plan::BucketBytes& b : params.buckets) shards.push_back(b.shard());
  const std::vector<int64_t> host = offload_split(shards, opt.effective_fraction());
  const int64_t moments = dtype_bytes(opt.exp_avg) + dtype_bytes(opt.exp_avg_sq);
  double device_bytes = 0, host_bytes = 0, host_elements = 0, down = 0, up = 0, norm_bytes = 0;
  for (size_t i = 0; i < params.buckets.size(); ++i) {
    const plan::BucketBytes& b = params.buckets[i];
    // Read master, gradient and both moments; write master, moments and (bf16 buckets) the compute copy.
    const int64_t per = 4 + 4 + moments + 4 + moments + (b.compute == DType::BF16 ? 2 : 0);
    device_bytes += static_cast<double>((shards[i] - host[i]) * per);
    host_bytes += static_cast<double>(host[i] * per);
    host_elements += static_cast<double>(host[i]);
    down += static_cast<double>(host[i] * 4);
    up += static_cast<double>(host[i] * dtype_bytes(b.compute));
    norm_bytes += static_cast<double>(shards[i] * 4);
  }
  const double device_s = device_bytes / (rates.adamw_gbps * 1e9);
  const double norm_s = norm_bytes / (rates.sum_squares_gbps * 1e9);
  const double host_s = host_elements / (rates.host_adamw_gelements_per_s * 1e9);
  const double down_s = down / (rates.pcie_gbps * 1e9), up_s = up / (rates.pcie_gbps * 1e9);
  // The copies up follow the host's update in stretches of 2^24 elements with or without the overlap
  // (optim/adamw.cc, AdamW::update): only the last stretch's copy is left after it. With the overlap
  // the copy down is pipelined the same way (the host waits only for the first stretch, then updates
  // while the rest come down) and the device's update runs beside it all.
  constexpr double kStretch = static_cast<double>(int64_t{1} << 24);
  const double stretch_s = std::min(up, kStretch * 2) / (rates.pcie_gbps * 1e9);
  const double first_down_s = std::min(down, kStretch * 4) / (rates.pcie_gbps * 1e9);
  const double offload_s = opt.overlap_d2h_h2d ? std::max(device_s, first_down_s + std::max(down_s, host_s) + stretch_s)
                                               : down_s + host_s + stretch_s + device_s;
  out.optimizer_s = norm_s + (host_bytes > 0 ? offload_s : device_s);
  out.parts.push_back({"device AdamW and norm", device_s + norm_s});
  if (host_bytes > 0) out.parts.push_back({"host AdamW and copies (offload)", down_s + host_s + up_s});
  return out;
}

}  // namespace quill::tune
