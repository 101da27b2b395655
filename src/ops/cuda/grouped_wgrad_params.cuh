// What the experts' weight-gradient kernels share (grouped_wgrad_wg.cu: the chosen cooperative kernel;
// grouped_wgrad_pingpong.cu: the ping-pong experiment of grouped_wgrad_wg.h): the parameter block, built once by
// backward_weight for either, and the TMA stores of the fp32 staging.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "ops/cuda/grouped_wgrad_wg.h"
#include "ops/device_context.h"
#if defined(__CUDACC__)
#include "ops/cuda/attention_wg.cuh"
#include "ops/cuda/grouped_wgrad_schedule.h"
#endif

namespace quill::cuda::grouped_wgrad {

struct Params {
  CUtensorMap dy_map, x_map;      // dy [P, M], x [P, N] as 64 x 64 boxes
  CUtensorMap dy_map_b, x_map_b;  // the second source's, when two_sources (else copies of the first's)
  CUtensorMap dw_map;             // dw [E, M, N] as 128 x 32 fp32 boxes
  float* dw;                      // [E, M, N]
  int M, N, E, tiles_m, tiles_n, accumulate, two_sources;
  int offset[kMaxExperts + 1];    // expert e's rows: [offset[e], offset[e + 1])
  int offset_b[kMaxExperts + 1];  // ... of the second source
};
static_assert(sizeof(Params) <= 4096, "grouped_wgrad: the parameter block over the classic 4 KiB kernel limit");

#if defined(__CUDACC__)
// Stage kt of tile x (grouped_wgrad_schedule.h: its source and rows) into shared memory at smem: dy's kTileM columns as
// two 64 x 64 boxes, then x's 64 kBBoxes columns as kBBoxes boxes, 128-byte swizzle; the bytes counted on bar.
template <int kBBoxes>
__device__ __forceinline__ void load_operand_stage(const Params& p, uint32_t smem, uint32_t bar, const Tile& x,
                                                   int kt) {
  constexpr int kABoxes = static_cast<int>(kTileM) / 64;
  attn_wg::mbar_arrive_expect_tx(bar, (kABoxes + kBBoxes) * attn_wg::kBoxBytes);
  const StageRows r = stage_rows(x, kt);
  const CUtensorMap* dy = r.source == 0 ? &p.dy_map : &p.dy_map_b;
  const CUtensorMap* in = r.source == 0 ? &p.x_map : &p.x_map_b;
#pragma unroll
  for (int j = 0; j < kABoxes; ++j)
    attn_wg::tma_load_3d(smem + j * attn_wg::kBoxBytes, dy, bar, x.m0 + 64 * j, r.row, 0);
#pragma unroll
  for (int j = 0; j < kBBoxes; ++j)
    attn_wg::tma_load_3d(smem + (kABoxes + j) * attn_wg::kBoxBytes, in, bar, x.n0 + 64 * j, r.row, 0);
}

// One accumulator pair into the fp32 staging at shared address addr: fl(old + sum) where the call accumulates (the
// one addition per element of every form), else the sums alone.
__device__ __forceinline__ void stage_pair(uint32_t addr, float a, float b, bool accumulate) {
  if (accumulate) {
    const float2 old = attn_wg::ld_shared_f2(addr);
    a = old.x + a, b = old.y + b;
  }
  attn_wg::st_shared_f2(addr, a, b);
}

// The staging box at shared address src to dw's 32 columns from n, rows from m, of expert e (one TMA store).
__device__ __forceinline__ void bulk_tensor_store(const CUtensorMap* map, uint32_t src, int n, int m, int e) {
  asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group [%0, {%2, %3, %4}], [%1];\n" ::"l"(
                   reinterpret_cast<uint64_t>(map)),
               "r"(src), "r"(n), "r"(m), "r"(e)
               : "memory");
}
#endif

// The ping-pong kernel (grouped_wgrad_pingpong.cu) on p, whose tiles_n counts kPingpongTileN-column tiles.
void launch_pingpong(const DeviceContext& ctx, const Params& p);

}  // namespace quill::cuda::grouped_wgrad
