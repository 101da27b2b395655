// The arithmetic of the Hopper attention backward (attention_wg_backward.cu) that can be checked
// without a GPU: its tiles, shared-memory map, step order and the fixed order of its dQ additions.
// Pure C++, constexpr (tests/ops/attention_wg_bwd_layout_test.cc). Descriptors and swizzle are the
// forward's (attention_wg_layout.h). Design note: docs/decisions/attention-wgmma.md.
//
// One CTA per (128-key tile, kv head): warpgroups 0 and 1 own keys s0 + 64 w .. + 63 (their dK and dV stay
// in registers over the whole CTA); thread 0 streams one 64-query tile of one query head per step by TMA
// (Q and dO), each warpgroup stages its bias by cp.async when the tile pair has distances below E. No producer
// warp: with one (288 threads) ptxas 13.0 holds every thread to 168 registers (a multiprocessor quarter's 16,384
// over its 3 warps), and the consumer needs ~250 (0 spills at 256 threads; at 168 it spills 1.2 KB and serialises
// the wgmma pipeline, C7512). A producer warpgroup (384 threads) could give the consumers at most 240 by setmaxnreg
// (24 + 2 x 240 of a quarter's 512 per lane; ptxas honours it for whole warpgroups under a one-CTA launch bound,
// attention_wg.cuh): below ~250, not tried.
#pragma once

#include "ops/cuda/attention_wg_layout.h"

namespace quill::cuda::attn_wg::bwd {

constexpr int kKeys = 128;                 // keys per CTA
constexpr int kWgKeys = 64;                // keys per consumer warpgroup (wgmma M)
constexpr int kQueries = 64;               // queries per step
constexpr int kConsumerWgs = kKeys / kWgKeys;
constexpr int kThreads = 128 * kConsumerWgs;
constexpr int kStages = 2;                 // Q / dO pipeline depth (the bias has one stage: see below)
constexpr int kRowFloats = 5;              // per query values (kSmemRows)

// ---- Shared memory (byte offsets from a 1024-byte-aligned base) ----
// K and V: boxes [key half w][head-dim half] (64 keys x 64 columns bf16, 8 KiB each). K is read both as
// the K-major A of S^T = K Q^T and as the MN-major B of dQ = dS K: the same rows, two descriptors.
constexpr int kSmemK = 0;
constexpr int kSmemV = kSmemK + 4 * kBoxBytes;
// Q and dO: [stage][head-dim half] boxes of 64 queries.
constexpr int kSmemQ = kSmemV + 4 * kBoxBytes;
constexpr int kSmemDo = kSmemQ + kStages * 2 * kBoxBytes;
// Bias: per warpgroup, its 64 keys' bias for the step's 64 queries, staged from the bias rows rb [T, H, E]
// (one GEMM per call, attention_tc_bias.cu) by cp.async as the mma.sync kernels stage it: query row r holds
// the 64 distances it needs as 17 aligned 16-byte chunks, row stride kRbLd floats (attention_tc.cuh's
// load_bias_tile_async / bias_at). One stage, loaded for the next step once both warpgroups are past this
// step's (the step's first consumer barrier). (Before: the forward's banded layout as TMA boxes; writing the
// band cost 1.7 ms per global layer under ncu, the rows' GEMM ~0.25 ms.)
constexpr int kRbLd = 68;
constexpr int kBiasWgBytes = kQueries * kRbLd * 4;
constexpr int kSmemBias = kSmemDo + kStages * 2 * kBoxBytes;
// dS (bf16): box w holds warpgroup w's 64 keys as rows, 64 queries along the row (the MN-major A of dQ).
constexpr int kSmemDs = kSmemBias + (kConsumerWgs * kBiasWgBytes + 1023) / 1024 * 1024;
// dQ staging (fp32): warpgroup w's 64 queries x 64 head-dim columns, the source of one bulk reduction.
constexpr int kDqStageBytes = kQueries * 64 * 4;
constexpr int kSmemDqStage = kSmemDs + kConsumerWgs * kBoxBytes;
// Per-query rows: [warpgroup][buffer][kRowFloats][64] fp32 (double-buffered: the next step's rows are
// loaded during this one): lse log2 e, D, tau, tau scale log2 e, tau log2 e.
constexpr int kSmemRows = kSmemDqStage + kConsumerWgs * kDqStageBytes;
constexpr int kRowsBytes = kConsumerWgs * 2 * kRowFloats * kQueries * 4;
// Barriers: kv_full, q_full[stage], q_empty[stage]; the producer form's dq_full[warpgroup], dq_empty[warpgroup].
constexpr int kSmemBarriers = kSmemRows + kRowsBytes;
constexpr int kBarrierCount = 1 + 2 * kStages + 2 * kConsumerWgs;
constexpr int kSmemBytes = kSmemBarriers + 8 * kBarrierCount + 1024;  // + alignment slack
static_assert(kSmemBytes <= kSmemLimit, "attention_wg backward: shared memory over the sm_90 limit");
static_assert(kSmemV % 1024 == 0 && kSmemQ % 1024 == 0 && kSmemDo % 1024 == 0 && kSmemBias % 1024 == 0 &&
                  kSmemDs % 1024 == 0 && kSmemDqStage % 1024 == 0,
              "attention_wg backward: every swizzled box must start on a 1024-byte boundary");

// ---- Schedule of one CTA (keys s0 .. s0 + 127, s0 = 128 kt) ----

// Queries that see some of the CTA's keys: from s0 (the diagonal) to the last row within the window.
QUILL_WG_HD constexpr int first_query(int s0) { return s0; }
QUILL_WG_HD constexpr int query_end(int s0, int T, int window) {
  return window > 0 ? (s0 + kKeys - 1 + window < T ? s0 + kKeys - 1 + window : T) : T;
}
QUILL_WG_HD constexpr int query_tile_count(int s0, int T, int window) {
  return (query_end(s0, T, window) - first_query(s0) + kQueries - 1) / kQueries;
}
// The lowest key tile (of 128) whose CTA visits query tile t0 (of 64): kt visits t0 when 128 kt <= t0 and
// t0 < 128 kt + 127 + window (or always, window 0).
QUILL_WG_HD constexpr int lowest_key_tile(int t0, int window) {
  if (window <= 0) return 0;
  const int x = t0 - (kKeys - 2) - window;  // 128 kt >= x
  return x <= 0 ? 0 : (x + kKeys - 1) / kKeys;
}
// dQ additions into the block of (query head, query tile t0, head-dim half) happen in key-tile order,
// lowest first: key tile kt waits until the block's counter equals this.
QUILL_WG_HD constexpr int additions_before(int kt, int t0, int window) { return kt - lowest_key_tile(t0, window); }

// True when every pair of queries t0 .. t0+63 by keys sw .. sw+63 is allowed (no mask needed).
QUILL_WG_HD constexpr bool pair_fully_allowed(int t0, int sw, int T, int window) {
  return sw + kWgKeys - 1 <= t0 && t0 + kQueries <= T && (window == 0 || t0 + kQueries - 1 - sw < window);
}
// True when some pair of queries t0 .. t0+63 by a warpgroup's keys sw .. sw+63 is closer than E: the
// warpgroup stages its bias for the step.
QUILL_WG_HD constexpr bool step_has_bias(int t0, int sw, int E) { return E > 0 && t0 - (sw + kWgKeys - 1) < E; }

}  // namespace quill::cuda::attn_wg::bwd
