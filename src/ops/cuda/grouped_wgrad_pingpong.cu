// The experts' weight gradient, ping-pong form (grouped_wgrad_wg.h: Form::kPingpong, an experiment called directly by
// grouped_bench and the tests): dw[e][m, n] (+)= sum over the rows r of expert e of dy[r, m] * x[r, n].
//
// Why: the chosen cooperative kernel (grouped_wgrad_wg.cu) runs a tile's product on both warpgroups and then its
// epilogue on both, so the tensor cores idle while the tile's fp32 gradient is read, added and written (at a seed
// rank's 768 rows per expert about as long as the product: docs/decisions/grouped-wgrad.md). Here each consumer
// warpgroup owns whole tiles, alternate ones of the CTA's walk, so one warpgroup's epilogue runs under the other's
// product, as CUTLASS's ping-pong GEMM schedules them.
//
// A CTA (one per multiprocessor) is two consumer warpgroups and a producer warpgroup (384 threads). Tiles are 128 rows
// m of dw by 128 columns n of one expert (the walk and the stages' rows: grouped_wgrad_schedule.h at kN = 128); the
// CTA's j-th tile belongs to warpgroup j % 2.
// - Producer (thread 256): every stage of every tile of the CTA in order, each into the next of five 32 KiB
//   stages once its last reader released it (the full / empty barriers of grouped_gemm_pipeline.cuh): dy's 128
//   columns and x's 128 columns of 64 rows, two 64 x 64 boxes each, 128-byte swizzle, both MN-major operands.
// - Consumer warpgroup w, per stage of its tile: wgmma m64n128k16 for its rows 0-63 and for 64-127 (two accumulators
//   of 64 floats a thread), committed as one group; after waiting for the previous group it releases that group's
//   stage (its four warps arrive). An expert's last stage may hold the next expert's rows: the warpgroup zeroes
//   them in shared memory first (only it reads the stage).
// - Epilogue of warpgroup w: its tile's gradient through its own 32 KiB staging in two 64-column halves, as the
//   cooperative kernel's: thread 0 of the warpgroup loads the first half's old gradient by TMA as the tile starts
//   (once its previous store has read the staging), each thread adds its accumulators there (one addition per
//   element, fl(dw + sum)), thread 0 stores the half by TMA, then the second half the same way. Shared memory:
//   5 x 32 KiB stages + 2 x 32 KiB stagings + barriers.
// The sums are the cooperative kernel's (the stages in row order, wgmma's k16 steps, one addition of the old
// gradient), so it is meant to give its bits: GroupedWgradWgmma.ThePingpongFormGivesTheHalfStagingsBits.
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_dq.cuh"
#include "ops/cuda/attention_wg.cuh"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/grouped_gemm_pipeline.cuh"
#include "ops/cuda/grouped_gemm_wg.h"
#include "ops/cuda/grouped_wgrad_params.cuh"
#include "ops/cuda/grouped_wgrad_schedule.h"

#include <algorithm>

namespace quill::cuda::grouped_wgrad {
namespace {

using namespace attn_wg;  // the mbarrier, TMA and wgmma building blocks and the descriptors
using attn_dq::bulk_commit;
using attn_dq::bulk_wait_all;
using attn_dq::bulk_wait_read;
using attn_dq::fence_proxy_async_smem;
using grouped_gemm::StageBarriers;

constexpr int kN = static_cast<int>(kPingpongTileN);
constexpr int kConsumerThreads = 256;
constexpr int kThreads = kConsumerThreads + 128;  // + the producer warpgroup (one thread of it loads)
// Registers by setmaxnreg: at 384 threads ptxas budgets 168 a thread, and the consumers (128 accumulators, the
// staging's epilogue) spilled 64-100 bytes at that (ptxas 13.0, -Xptxas -v; 0 with these). Balanced: 128 x 40 +
// 256 x 232 = 64,512 of the multiprocessor's 65,536 registers (an unbalanced increase would wait forever).
constexpr int kProducerRegisters = 40, kConsumerRegisters = 232;
constexpr int kABoxes = static_cast<int>(kTileM) / 64, kBBoxes = kN / 64;
constexpr int kStageBytes = (kABoxes + kBBoxes) * kBoxBytes;  // 32 KiB
constexpr int kParts = 2;                                      // a tile's gradient through the staging in halves
constexpr int kPartCols = kN / kParts, kPartGroups = kPartCols / 8;
constexpr int kStagingBoxes = staging_boxes(kN) / kParts;
constexpr int kStagingBytes = kStagingBoxes * kStagingBoxBytes;                  // 32 KiB per warpgroup
constexpr int kStages = (kSmemLimit - 2 * kStagingBytes - 2048) / kStageBytes;   // 5
constexpr int kSmemStaging = kStages * kStageBytes;
constexpr int kSmemBarriers = kSmemStaging + 2 * kStagingBytes;
constexpr int kSmemBytes = kSmemBarriers + 8 * (2 * kStages + 2) + 1024;  // stage and staging barriers, alignment
static_assert(kSmemBytes <= kSmemLimit, "grouped_wgrad (ping-pong): shared memory over the sm_90 limit");
static_assert(kStageBytes % 1024 == 0 && kStagingBytes % 1024 == 0, "grouped_wgrad (ping-pong): 1024-byte boxes");
static_assert(kStages >= 4, "grouped_wgrad (ping-pong): fewer than four operand stages");

__global__ void __launch_bounds__(kThreads, 1) grouped_wgrad_pingpong_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x, warp_id = tid / 32, lane = tid % 32;
  const int total = p.E * p.tiles_m * p.tiles_n;
  const StageBarriers bars{base + kSmemBarriers, kStages};
  auto stage = [&](int s) { return base + s * kStageBytes; };
  auto staged = [&](int w) { return base + kSmemBarriers + 16 * kStages + 8 * w; };  // warpgroup w's old gradient
  if (tid == 0) {
    mbar_init(staged(0), 1);
    mbar_init(staged(1), 1);
    bars.init(4);  // a stage is read by one warpgroup: its four warps release it (and the barriers' fence)
  }
  __syncthreads();

  if (warp_id >= kConsumerThreads / 32) {  // the producer warpgroup
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kProducerRegisters));
    if (warp_id == kConsumerThreads / 32 && lane == 0) {
      tma_prefetch_descriptor(&p.dy_map);
      tma_prefetch_descriptor(&p.x_map);
      if (p.two_sources) {
        tma_prefetch_descriptor(&p.dy_map_b);
        tma_prefetch_descriptor(&p.x_map_b);
      }
      int it = 0;
      for (int t = blockIdx.x; t < total; t += gridDim.x) {
        const Tile x = tile_at<kN>(p, t);
        const int stages = stage_count(x);
        for (int kt = 0; kt < stages; ++kt, ++it) {
          bars.wait_free(it);
          load_operand_stage<kBBoxes>(p, stage(it % kStages), bars.full(it % kStages), x, kt);
        }
      }
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters));
  const int w = warp_id / 4, wt = tid % 128, warp = wt / 32, g = lane >> 2, cq = lane & 3;
  const bool leader = wt == 0;  // issues the warpgroup's staging loads and stores
  const int group_barrier = 1 + w;
  const uint32_t staging = base + kSmemStaging + w * kStagingBytes;
  if (leader) tma_prefetch_descriptor(&p.dw_map);
  int it = 0;            // the CTA's stages before this tile's (both warpgroups'): this tile's loads' ring index
  int staged_loads = 0;  // old-gradient loads this warpgroup waited for: its staging barrier's phase parity
  // The products take turns (CUTLASS's ordered ping-pong): warpgroup w starts tile j's only once the other has
  // finished tile j - 1's (named barriers 3: warpgroup 0's product done, 4: warpgroup 1's). Besides keeping the
  // tensor cores to one product at a time, this is what keeps the stage barriers' phases unambiguous: a warpgroup
  // skips the other's stages, and without the turn it could wait on a stage's barrier a whole ring ahead of its
  // fill, where a phase parity cannot tell the rounds apart (the first form deadlocked so: 2026-12-07, H100).
  const int order_wait = w == 0 ? 4 : 3, order_signal = w == 0 ? 3 : 4;
  const int first_tile = static_cast<int>(blockIdx.x), grid = static_cast<int>(gridDim.x);
  const int cta_tiles = first_tile < total ? (total - 1 - first_tile) / grid + 1 : 0;  // this CTA's tiles
  int j = 0;
  for (int t = blockIdx.x; t < total; t += gridDim.x, ++j) {
    const Tile x = tile_at<kN>(p, t);
    const int stages = stage_count(x);
    if ((j & 1) != w) {  // the other warpgroup's tile
      it += stages;
      continue;
    }
    // The first half's old gradient into the staging under this tile's product, once the previous store has read it.
    if (p.accumulate && leader && stages > 0) {
      bulk_wait_read();
      mbar_arrive_expect_tx(staged(w), kStagingBytes);
#pragma unroll
      for (int b = 0; b < kStagingBoxes; ++b)
        tma_load_3d(staging + b * kStagingBoxBytes, &p.dw_map, staged(w), x.n0 + 32 * b, x.m0, x.e);
    }
    if (j > 0) named_barrier(order_wait, 256);  // the other warpgroup's product of tile j - 1 is done
    if (stages == 0) {
      if (j + 1 < cta_tiles) named_barrier_arrive(order_signal, 256);
      // An expert without rows: its gradient is left as it is when accumulating, zeroed by a first write.
      if (!p.accumulate) {
        float4* row = reinterpret_cast<float4*>(p.dw + (static_cast<size_t>(x.e) * p.M + x.m0 + wt) * p.N + x.n0);
#pragma unroll 8
        for (int c = 0; c < kN / 4; ++c) row[c] = make_float4(0.f, 0.f, 0.f, 0.f);
      }
      continue;
    }
    float acc0[kN / 2], acc1[kN / 2];  // rows 0-63 and 64-127 of the tile
    for (int kt = 0; kt < stages; ++kt, ++it) {
      const int s = it % kStages;
      bars.wait_full(it);
      const int valid = stage_rows(x, kt).valid;
      if (valid < kTileRows) {
        // Rows valid .. 63 of every box belong to the next expert (or are TMA's zeros): zero them (a swizzled box
        // keeps each row's 128 bytes together).
        const int chunks_per_box = (static_cast<int>(kTileRows) - valid) * 8;
        for (int i = wt; i < chunks_per_box * (kABoxes + kBBoxes); i += 128) {
          const int box = i / chunks_per_box, c = i % chunks_per_box;
          const uint32_t addr = stage(s) + box * kBoxBytes + (valid + c / 8) * kRowBytes + (c % 8) * 16;
          asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0) : "memory");
        }
        fence_proxy_async_smem();  // the generic proxy's zeros, before the async proxy's wgmma reads them
        named_barrier(group_barrier, 128);
      }
      const uint64_t da0 = mn_major_desc(stage(s)), da1 = mn_major_desc(stage(s) + kBoxBytes);
      const uint64_t db = mn_major_desc(stage(s) + kABoxes * kBoxBytes);
      fence_regs(acc0);
      fence_regs(acc1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk) {
        const uint64_t step = (kk * 16 * kRowBytes) >> 4;
        const int scale_d = (kt > 0 || kk > 0) ? 1 : 0;
        wgmma_m64n128k16_ss<1, 1>(acc0, da0 + step, db + step, scale_d);
        wgmma_m64n128k16_ss<1, 1>(acc1, da1 + step, db + step, scale_d);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous stage's products are done: release it
      fence_regs(acc0);
      fence_regs(acc1);
      if (kt > 0 && lane == 0) mbar_arrive(bars.empty((it + kStages - 1) % kStages));
    }
    wgmma_wait<0>();
    fence_regs(acc0);
    fence_regs(acc1);
    if (lane == 0) mbar_arrive(bars.empty((it + kStages - 1) % kStages));
    if (j + 1 < cta_tiles) named_barrier_arrive(order_signal, 256);  // the other warpgroup's turn
    // Each half through the staging: the old gradient in (accumulating; the first half's loaded under the product,
    // the second's once the first's store has read the staging), each accumulator pair added at its place
    // (staging_byte with the row half as its warpgroup), then the half to dw by TMA.
#pragma unroll
    for (int part = 0; part < kParts; ++part) {
      const int n0 = x.n0 + part * kPartCols;
      if (p.accumulate) {
        if (part > 0 && leader) {
          bulk_wait_read();
          mbar_arrive_expect_tx(staged(w), kStagingBytes);
#pragma unroll
          for (int b = 0; b < kStagingBoxes; ++b)
            tma_load_3d(staging + b * kStagingBoxBytes, &p.dw_map, staged(w), n0 + 32 * b, x.m0, x.e);
        }
        mbar_wait(staged(w), staged_loads & 1, kStages + w);
        ++staged_loads;
      } else {
        if (leader) bulk_wait_read();  // the previous store has read the staging
        named_barrier(group_barrier, 128);
      }
#pragma unroll
      for (int jj = 0; jj < kPartGroups; ++jj) {
        const int jc = part * kPartGroups + jj;
#pragma unroll
        for (int sel = 0; sel < 2; ++sel) {
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const float* acc = h == 0 ? acc0 : acc1;
            stage_pair(staging + staging_byte(h, warp, g, cq, jj, sel), acc[4 * jc + 2 * sel],
                       acc[4 * jc + 2 * sel + 1], p.accumulate);
          }
        }
      }
      fence_proxy_async_smem();  // the generic proxy's writes, before the TMA unit reads them
      named_barrier(group_barrier, 128);
      if (leader) {
#pragma unroll
        for (int b = 0; b < kStagingBoxes; ++b)
          bulk_tensor_store(&p.dw_map, staging + b * kStagingBoxBytes, n0 + 32 * b, x.m0, x.e);
        bulk_commit();
      }
    }
  }
  if (leader) bulk_wait_all();  // the last stores have left shared memory before the CTA ends
}

}  // namespace

void launch_pingpong(const DeviceContext& ctx, const Params& p) {
  QUILL_CHECK(p.M % kTileM == 0 && p.N % kN == 0 && p.tiles_n == p.N / kN,
              "grouped_linear_backward_weight (wgmma, ping-pong): dw's [{}, {}] is not a multiple of its {} x {} tile",
              p.M, p.N, kTileM, kN);
  const void* kernel = reinterpret_cast<const void*>(grouped_wgrad_pingpong_kernel);
  attn::set_smem("grouped_linear_backward_weight (wgmma, ping-pong)", kernel, kSmemBytes);
  const unsigned grid = grouped_gemm::persistent_ctas(static_cast<int64_t>(p.E) * p.tiles_m * p.tiles_n);
  grouped_wgrad_pingpong_kernel<<<grid, kThreads, kSmemBytes, stream_of(ctx)>>>(p);
  QUILL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace quill::cuda::grouped_wgrad
