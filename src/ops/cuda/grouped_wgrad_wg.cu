// The routed experts' weight gradient as one persistent Hopper kernel (grouped_wgrad_wg.h says why):
// dw[e][m, n] (+)= sum over the rows r of expert e of dy[r, m] * x[r, n].
//
// Each CTA (two consumer warpgroups, 256 threads, one per multiprocessor) walks the tiles t = blockIdx.x,
// blockIdx.x + gridDim.x, ... of every expert (tile = expert e, 128 rows m of dw, kN = 256 columns n). A tile's
// product runs over its expert's rows 64 at a time: thread 0 loads each 64-row stage by TMA (dy's 128 columns as
// two 64 x 64 boxes, x's 256 columns as four, 128-byte swizzle; the wgmma operands are both MN-major, rows = the
// contraction), three stages deep, and keeps loading across tile boundaries, so the next tile's first rows arrive
// while this tile's accumulators drain. Warpgroup w multiplies its 64 rows of m by all 256 columns (wgmma
// m64n256k16, 128 fp32 accumulators per thread). An expert's last stage may hold rows of the next expert (TMA reads
// past the expert; only past the tensor's end does it fill zeros): those rows are zeroed in shared memory before
// the product.
//
// The fp32 gradient tile (128 KiB) goes through a staging of half a tile in shared memory (64 KiB: four swizzled
// 128 x 32 fp32 boxes), one half after the other. When accumulating, thread 0 starts the TMA load of the first
// half's old gradient into the staging as the tile begins (as soon as the previous tile's store has read it), so
// the load runs under the tile's product; each thread adds its accumulators to the staged values in place and
// thread 0 hands the half to the TMA unit as a bulk tensor store; then the second half's old gradient comes in once
// that store has read the staging, and goes the same way. A first write stores the accumulators alone. Why half a
// staging: a whole one (128 KiB) left room for two operand stages, each waited for in full; three measured 12.5%
// faster at the pairs' 768 rows and no slower anywhere (docs/decisions/grouped-wgrad.md, with the forms measured
// before: the TMA's bulk reduction, 128-wide tiles, two stagings, the old gradient through registers). The kernel
// is a template on the parts: two (the chosen half staging) or four (Form::kQuarter, an experiment: a quarter-tile
// staging and four operand stages).
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_dq.cuh"
#include "ops/cuda/attention_wg.cuh"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/grouped_gemm_wg.h"
#include "ops/cuda/grouped_wgrad_params.cuh"
#include "ops/cuda/grouped_wgrad_schedule.h"
#include "ops/cuda/grouped_wgrad_wg.h"
#include "ops/cuda/tma_matrix_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace quill::cuda::grouped_wgrad {
namespace {

using namespace attn_wg;  // the mbarrier, TMA and wgmma building blocks and the descriptors
using attn_dq::bulk_commit;  // the bulk-async groups and the proxy fence of the attention dQ reductions
using attn_dq::bulk_wait_all;
using attn_dq::bulk_wait_read;
using attn_dq::fence_proxy_async_smem;

constexpr int kThreads = 256;
constexpr int kABoxes = kTileM / 64;

// Shared memory: kStages operand stages of dy's 128 columns and x's 256, then the fp32 staging of one part of a
// tile's gradient (a half, or a quarter: the experiment of grouped_wgrad_wg.h), then the barriers. As many stages as
// fit beside the staging.
template <int kPartsOfTile>
struct Shape {
  static constexpr int kN = static_cast<int>(kTileN);
  static constexpr int kParts = kPartsOfTile;  // the tile's gradient through the staging in kParts column blocks
  static constexpr int kBBoxes = kN / 64;
  static constexpr int kStageBytes = (kABoxes + kBBoxes) * kBoxBytes;  // 48 KiB
  static constexpr int kStagingBoxes = staging_boxes(kN) / kParts;
  static constexpr int kStagingBytes = kStagingBoxes * kStagingBoxBytes;  // 64 KiB (a half), 32 KiB (a quarter)
  static constexpr int kStages = (kSmemLimit - kStagingBytes - 2048) / kStageBytes;  // 3, 4
  static constexpr int kSmemStaging = kStages * kStageBytes;
  static constexpr int kSmemBarriers = kSmemStaging + kStagingBytes;
  static constexpr int kSmemBytes = kSmemBarriers + 8 * (kStages + 1) + 1024;  // + the staging's barrier, alignment
  static_assert(kSmemBytes <= kSmemLimit, "grouped_wgrad: shared memory over the sm_90 limit");
  static_assert(kStageBytes % 1024 == 0, "grouped_wgrad: every swizzled box must start on a 1024-byte boundary");
  static_assert(kStages >= 3, "grouped_wgrad: fewer than three operand stages");
};

// Warpgroup w's 64 rows of the tile by all kN columns, over one 64-row stage (four k16 steps).
__device__ __forceinline__ void multiply_stage(float (&acc)[kTileN / 2], uint64_t da, uint64_t db, int kt) {
#pragma unroll
  for (int kk = 0; kk < 4; ++kk) {
    const uint64_t step = (kk * 16 * kRowBytes) >> 4;
    const int scale_d = (kt > 0 || kk > 0) ? 1 : 0;
    wgmma_m64n256k16_ss<1, 1>(acc, da + step, db + step, scale_d);
  }
}

template <int kParts>
__global__ void __launch_bounds__(kThreads, 1) grouped_wgrad_kernel(const __grid_constant__ Params p) {
  using S = Shape<kParts>;
  constexpr int kN = S::kN, kStages = S::kStages;
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x, w = tid / 128, warp = (tid % 128) / 32, lane = tid % 32;
  const int g = lane >> 2, cq = lane & 3;
  const int total = p.E * p.tiles_m * p.tiles_n;
  auto full = [&](int s) { return base + S::kSmemBarriers + 8 * s; };
  auto stage = [&](int s) { return base + s * S::kStageBytes; };
  const uint32_t staging = base + S::kSmemStaging;
  const uint32_t staged = full(kStages);  // the staging's load of the old gradient (accumulating)

  Cursor producer{static_cast<int>(blockIdx.x), -1};
  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) mbar_init(full(s), 1);
    mbar_init(staged, 1);
    mbar_init_fence();
    tma_prefetch_descriptor(&p.dy_map);
    tma_prefetch_descriptor(&p.x_map);
    if (p.two_sources) {
      tma_prefetch_descriptor(&p.dy_map_b);
      tma_prefetch_descriptor(&p.x_map_b);
    }
    tma_prefetch_descriptor(&p.dw_map);
    advance<kN>(p, total, static_cast<int>(gridDim.x), producer);
    for (int s = 0; s < kStages && producer.t < total; ++s) {
      load_operand_stage<Shape<2>::kBBoxes>(p, stage(s), full(s), tile_at<kN>(p, producer.t), producer.kt);
      advance<kN>(p, total, static_cast<int>(gridDim.x), producer);
    }
  }
  __syncthreads();

  int staged_loads = 0;  // old-gradient loads this CTA waited for: the staging barrier's phase parity
  int consumed = 0;  // stages consumed by this CTA: stage consumed % kStages, phase parity (consumed / kStages) & 1
  for (int t = blockIdx.x; t < total; t += gridDim.x) {
    const Tile x = tile_at<kN>(p, t);
    float* out = p.dw + (static_cast<size_t>(x.e) * p.M + x.m0 + 64 * w + 16 * warp + g) * p.N + x.n0 + 2 * cq;
    if (x.rows + x.rows_b == 0) {
      // An expert without rows: its gradient is left as it is when accumulating, zeroed by a first write.
      if (!p.accumulate)
#pragma unroll 4
        for (int j = 0; j < kN / 8; ++j) {
          *reinterpret_cast<float2*>(out + 8 * j) = make_float2(0.f, 0.f);
          *reinterpret_cast<float2*>(out + 8 * p.N + 8 * j) = make_float2(0.f, 0.f);
        }
      continue;
    }
    // The old gradient into the staging under this tile's product, once the previous tile's store has read it.
    if (p.accumulate && tid == 0) {
      bulk_wait_read();
      mbar_arrive_expect_tx(staged, S::kStagingBytes);
#pragma unroll
      for (int b = 0; b < S::kStagingBoxes; ++b)
        tma_load_3d(staging + b * kStagingBoxBytes, &p.dw_map, staged, x.n0 + 32 * b, x.m0, x.e);
    }
    float acc[kN / 2];
    const int stages = stage_count(x);
    for (int kt = 0; kt < stages; ++kt, ++consumed) {
      const int s = consumed % kStages;
      mbar_wait(full(s), (consumed / kStages) & 1, s);
      const int valid = stage_rows(x, kt).valid;
      if (valid < kTileRows) {
        // Rows valid .. 63 of every box belong to the next expert (or are TMA's zeros): zero them. A swizzled
        // box keeps each row's 128 bytes together (the swizzle permutes 16-byte chunks inside a row).
        const int chunks_per_box = (static_cast<int>(kTileRows) - valid) * 8;
        for (int i = tid; i < chunks_per_box * (kABoxes + S::kBBoxes); i += kThreads) {
          const int box = i / chunks_per_box, c = i % chunks_per_box;
          const uint32_t addr = stage(s) + box * kBoxBytes + (valid + c / 8) * kRowBytes + (c % 8) * 16;
          asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(addr), "r"(0) : "memory");
        }
        fence_proxy_async_smem();  // the generic proxy's zeros, before the async proxy's wgmma reads them
        __syncthreads();
      }
      fence_regs(acc);
      wgmma_fence();
      multiply_stage(acc, mn_major_desc(stage(s) + w * kBoxBytes), mn_major_desc(stage(s) + kABoxes * kBoxBytes),
                            kt);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(acc);
      __syncthreads();  // both warpgroups are past stage s: it can be loaded again
      if (tid == 0 && producer.t < total) {
        load_operand_stage<Shape<2>::kBBoxes>(p, stage(s), full(s), tile_at<kN>(p, producer.t), producer.kt);
        advance<kN>(p, total, static_cast<int>(gridDim.x), producer);
      }
    }
    // Each part (column block) of the tile through the staging: the old gradient in (accumulating; part 0's was
    // loaded under the product, a later part's once the previous part's store has read the staging), each
    // accumulator pair to its place (staging_byte, grouped_wgrad_schedule.h) with one addition, fl(dw + sum), as
    // cuBLASLt's beta-1 epilogue computes it, then the part to dw by TMA.
    constexpr int kPartCols = kN / S::kParts, kPartGroups = kPartCols / 8;
#pragma unroll
    for (int part = 0; part < S::kParts; ++part) {
      const int n0 = x.n0 + part * kPartCols;
      if (p.accumulate) {
        if (part > 0 && tid == 0) {
          bulk_wait_read();
          mbar_arrive_expect_tx(staged, S::kStagingBytes);
#pragma unroll
          for (int b = 0; b < S::kStagingBoxes; ++b)
            tma_load_3d(staging + b * kStagingBoxBytes, &p.dw_map, staged, n0 + 32 * b, x.m0, x.e);
        }
        mbar_wait(staged, staged_loads & 1, kStages);  // the part's old gradient is in the staging
        ++staged_loads;
      } else {
        if (tid == 0) bulk_wait_read();  // the previous store has read the staging
        __syncthreads();
      }
#pragma unroll
      for (int jj = 0; jj < kPartGroups; ++jj) {
        const int j = part * kPartGroups + jj;
#pragma unroll
        for (int sel = 0; sel < 2; ++sel) {
          stage_pair(staging + staging_byte(w, warp, g, cq, jj, sel), acc[4 * j + 2 * sel], acc[4 * j + 2 * sel + 1],
                     p.accumulate);
        }
      }
      fence_proxy_async_smem();  // the generic proxy's writes, before the TMA unit reads them
      __syncthreads();
      if (tid == 0) {
#pragma unroll
        for (int b = 0; b < S::kStagingBoxes; ++b)
          bulk_tensor_store(&p.dw_map, staging + b * kStagingBoxBytes, n0 + 32 * b, x.m0, x.e);
        bulk_commit();
      }
    }
  }
  if (tid == 0) bulk_wait_all();  // the last stores have left shared memory before the CTA ends
}

}  // namespace

std::string unsupported_reason(int64_t E, int64_t M, int64_t N, const void* dy, const void* x) {
  if (!attn_wg::device_supported()) return "needs a compute capability 9.0 GPU (sm_90a: wgmma, TMA)";
  if (M % kTileM != 0 || N % kTileN != 0)
    return fmt::format("dw's [{}, {}] is not a multiple of the kernel's {} x {} tile", M, N, kTileM, kTileN);
  if (E > kMaxExperts) return fmt::format("{} experts, more than the kernel's {}", E, kMaxExperts);
  if (reinterpret_cast<uintptr_t>(dy) % 16 != 0 || reinterpret_cast<uintptr_t>(x) % 16 != 0)
    return "an operand is not 16-byte aligned (TMA)";
  return "";
}

namespace {

// offset[e] = the first row of expert e in a source of P rows (counts on the host), offset[E] = P.
void fill_offsets(const int64_t* counts, int64_t E, int64_t P, int* offset) {
  int64_t row = 0;
  for (int64_t e = 0; e < E; ++e) {
    offset[e] = static_cast<int>(row);
    row += counts[e];
  }
  offset[E] = static_cast<int>(row);
  QUILL_CHECK(row == P, "grouped_linear_backward_weight (wgmma): the counts sum to {}, not the {} rows", row, P);
}

}  // namespace

void backward_weight(const DeviceContext& ctx, const void* dy_PM, const void* x_PN, const int64_t* counts, int64_t E,
                     int64_t P, int64_t M, int64_t N, float* dw_EMN, bool accumulate, const Rows* second,
                     Form form) {
  const std::string why = unsupported_reason(E, M, N, dy_PM, x_PN);
  QUILL_CHECK(why.empty(), "grouped_linear_backward_weight (wgmma): {}", why);
  const int64_t P_b = second != nullptr ? second->P : 0;
  if (second != nullptr) {
    const std::string why_b = unsupported_reason(E, M, N, second->dy, second->x);
    QUILL_CHECK(why_b.empty(), "grouped_linear_backward_weight (wgmma), second rows: {}", why_b);
  }
  QUILL_CHECK(std::max(P, P_b) < (int64_t{1} << 31) && M * N < (int64_t{1} << 31),
              "grouped_linear_backward_weight (wgmma): [{}, {}] x {} rows is beyond the kernel's 32-bit indexing", M, N,
              std::max(P, P_b));
  if (E == 0) return;
  Params p{};
  p.dy_map = attn_wg::bf16_matrix_map("dy_PM", dy_PM, std::max<int64_t>(P, 1), M);
  p.x_map = attn_wg::bf16_matrix_map("x_PN", x_PN, std::max<int64_t>(P, 1), N);
  p.two_sources = second != nullptr ? 1 : 0;
  p.dy_map_b = second != nullptr ? attn_wg::bf16_matrix_map("dy_PM (second)", second->dy, std::max<int64_t>(P_b, 1), M)
                                 : p.dy_map;
  p.x_map_b = second != nullptr ? attn_wg::bf16_matrix_map("x_PN (second)", second->x, std::max<int64_t>(P_b, 1), N)
                                : p.x_map;
  p.dw_map = attn_wg::f32_blocks_map("dw_EMN", dw_EMN, E, M, N);
  p.dw = dw_EMN;
  p.M = static_cast<int>(M), p.N = static_cast<int>(N), p.E = static_cast<int>(E);
  p.tiles_m = static_cast<int>(M / kTileM);
  p.tiles_n = static_cast<int>(N / (form == Form::kPingpong ? kPingpongTileN : kTileN));
  p.accumulate = accumulate ? 1 : 0;
  fill_offsets(counts, E, P, p.offset);
  if (second != nullptr) fill_offsets(second->counts, E, P_b, p.offset_b);
  if (form == Form::kPingpong) {
    launch_pingpong(ctx, p);
    return;
  }
  const bool quarter = form == Form::kQuarter;
  const void* kernel = quarter ? reinterpret_cast<const void*>(grouped_wgrad_kernel<4>)
                               : reinterpret_cast<const void*>(grouped_wgrad_kernel<2>);
  const int smem = quarter ? Shape<4>::kSmemBytes : Shape<2>::kSmemBytes;
  attn::set_smem("grouped_linear_backward_weight (wgmma)", kernel, smem);
  const unsigned grid = grouped_gemm::persistent_ctas(E * p.tiles_m * p.tiles_n);
  if (quarter) grouped_wgrad_kernel<4><<<grid, kThreads, smem, stream_of(ctx)>>>(p);
  else grouped_wgrad_kernel<2><<<grid, kThreads, smem, stream_of(ctx)>>>(p);
  QUILL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace quill::cuda::grouped_wgrad
