// One persistent launch for the routed experts' forward or input-gradient GEMM (grouped_gemm_wg.h says why).
//
// A CTA (one per multiprocessor) is two consumer warpgroups and one producer warp (288 threads). It walks the
// tiles t = blockIdx.x, blockIdx.x + gridDim.x, ... of every expert: a tile is 128 rows of expert e (from its
// first row, in steps of 128) by 256 output columns. The tiles of one expert are numbered column block by column
// block, the row tiles of a column block adjacent, so the CTAs that run at the same time share each 256-column
// block of the expert's weights in L2 (a seed expert's gate/up matrix is 32 MiB; read once from memory per expert
// instead of once per row tile).
// (The schedule's arithmetic: grouped_gemm_schedule.h.)
// - Producer (lane 0 of warp 8): for each of its tiles and each 64-wide slice of the contraction, waits for a free
//   stage (kStages deep, across tile boundaries), then loads a's 128 x 64 slice (two 64 x 64 boxes) and B's 256 x
//   64 slice (four boxes) by TMA, 128-byte swizzle, completion counted in bytes on the stage's full barrier. Rows
//   past the expert's last belong to the next expert (or are TMA's zeros past the tensor's end): their products
//   are computed and never stored.
// - Consumer warpgroup w owns rows 64 w .. 64 w + 63 of the tile: per stage four wgmma m64n256k16 (A K-major;
//   B K-major in the forward, MN-major in the input gradient), committed as one group; after waiting for the
//   previous group it releases that group's stage (one arrival per warp on the stage's empty barrier). The
//   epilogue rounds the fp32 accumulators to bf16 and stores the expert's rows of the tile.
// Descriptors and swizzle: attention_wg_layout.h (CPU-tested); the mbarrier, TMA and wgmma blocks:
// attention_wg.cuh.
#include "ops/cuda/attention_common.cuh"
#include "ops/cuda/attention_wg.cuh"
#include "ops/cuda/attention_wg.h"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/grouped_gemm_pipeline.cuh"
#include "ops/cuda/grouped_gemm_schedule.h"
#include "ops/cuda/grouped_gemm_wg.h"
#include "ops/cuda/tma_matrix_map.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>

namespace quill::cuda::grouped_gemm {
namespace {

using namespace attn_wg;  // the mbarrier, TMA and wgmma building blocks and the descriptors

constexpr int kStages = 4;
constexpr int kConsumerThreads = 256;
constexpr int kThreads = kConsumerThreads + 32;  // + the producer warp
constexpr int kABoxes = static_cast<int>(kTileRows) / 64, kBBoxes = static_cast<int>(kTileCols) / 64;
constexpr int kStageABytes = kABoxes * kBoxBytes;                  // 16 KiB
constexpr int kStageBytes = (kABoxes + kBBoxes) * kBoxBytes;       // 48 KiB
constexpr int kSmemBarriers = kStages * kStageBytes;
constexpr int kSmemBytes = kSmemBarriers + 16 * kStages + 1024;   // full and empty barriers, alignment slack
constexpr int kKSteps = static_cast<int>(kTileK) / 16;            // wgmma k16 steps per stage
static_assert(kTileK == kHalfCols, "grouped_gemm: a stage is one 128-byte box wide");
static_assert(kSmemBytes <= kSmemLimit, "grouped_gemm: shared memory over the sm_90 limit");
static_assert(kStageBytes % 1024 == 0, "grouped_gemm: every swizzled box must start on a 1024-byte boundary");

struct Params {
  CUtensorMap a_map;  // a [P, C] as 64 x 64 boxes
  CUtensorMap w_map;  // forward: w [E N, C]; input gradient: w [E C, N]; 64 x 64 boxes
  __nv_bfloat16* y;   // [P, N]
  int N, C, E, k_tiles, n_tiles, total;
  int row_offset[kMaxExperts + 1];   // expert e's rows: [row_offset[e], row_offset[e + 1])
  int tile_offset[kMaxExperts + 1];  // expert e's tiles: [tile_offset[e], tile_offset[e + 1])
};

__device__ __forceinline__ Tile tile_of(const Params& p, int t) {
  return tile_at(p.row_offset, p.tile_offset, p.E, static_cast<int>(kTileRows), static_cast<int>(kTileCols), t);
}

template <int kTransB>
__device__ __forceinline__ void load_stage(const Params& p, uint32_t smem, uint32_t bar, const Tile& x, int kt) {
  mbar_arrive_expect_tx(bar, kStageBytes);
  const int k0 = kt * static_cast<int>(kTileK);
#pragma unroll
  for (int j = 0; j < kABoxes; ++j) tma_load_3d(smem + j * kBoxBytes, &p.a_map, bar, k0, x.row0 + x.m0 + 64 * j, 0);
#pragma unroll
  for (int j = 0; j < kBBoxes; ++j) {
    const uint32_t dst = smem + kStageABytes + j * kBoxBytes;
    if (kTransB)  // rows = the contraction (w[e] is [C, N]): box j is columns n0 + 64 j of rows k0 ..
      tma_load_3d(dst, &p.w_map, bar, x.n0 + 64 * j, x.e * p.C + k0, 0);
    else          // rows = output columns (w[e] is [N, C]): box j is rows n0 + 64 j of columns k0 ..
      tma_load_3d(dst, &p.w_map, bar, k0, x.e * p.N + x.n0 + 64 * j, 0);
  }
}

template <int kTransB>
__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const StageBarriers bars{base + kSmemBarriers, kStages};
  auto stage = [&](int s) { return base + s * kStageBytes; };
  if (tid == 0) bars.init(kConsumerThreads / 32);
  __syncthreads();

  if (warp == kConsumerThreads / 32) {  // the producer warp
    if (lane == 0) {
      tma_prefetch_descriptor(&p.a_map);
      tma_prefetch_descriptor(&p.w_map);
      int it = 0;
      for (int t = blockIdx.x; t < p.total; t += gridDim.x) {
        const Tile x = tile_of(p, t);
        for (int kt = 0; kt < p.k_tiles; ++kt, ++it) {
          bars.wait_free(it);
          load_stage<kTransB>(p, stage(it % kStages), bars.full(it % kStages), x, kt);
        }
      }
    }
    return;
  }

  const int w = warp / 4, g = lane >> 2, cq = lane & 3;
  int it = 0;
  for (int t = blockIdx.x; t < p.total; t += gridDim.x) {
    const Tile x = tile_of(p, t);
    float acc[128];
    for (int kt = 0; kt < p.k_tiles; ++kt, ++it) {
      const int s = it % kStages;
      bars.wait_full(it);
      const uint64_t da = k_major_desc(stage(s) + w * kBoxBytes);
      const uint64_t db = kTransB ? mn_major_desc(stage(s) + kStageABytes) : k_major_desc(stage(s) + kStageABytes);
      fence_regs(acc);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kKSteps; ++kk) {
        // K-major: 16 bf16 of the contraction are 32 bytes along the row; MN-major: 16 rows of 128 bytes.
        const uint64_t b_step = kTransB ? ((kk * 16 * kRowBytes) >> 4) : ((kk * 32) >> 4);
        wgmma_m64n256k16_ss<0, kTransB>(acc, da + ((kk * 32) >> 4), db + b_step, (kt > 0 || kk > 0) ? 1 : 0);
      }
      wgmma_commit();
      wgmma_wait<1>();  // the previous stage's products are done: release it
      fence_regs(acc);
      if (kt > 0 && lane == 0) mbar_arrive(bars.empty((it + kStages - 1) % kStages));
    }
    wgmma_wait<0>();
    fence_regs(acc);
    if (lane == 0) mbar_arrive(bars.empty((it + kStages - 1) % kStages));
    // Accumulator 4 j + 2 sel (+1) is row 64 w + 16 (warp % 4) + g + 8 sel of the tile, columns 8 j + 2 cq (+1).
#pragma unroll
    for (int sel = 0; sel < 2; ++sel) {
      const int r = x.m0 + 64 * w + 16 * (warp % 4) + g + 8 * sel;
      if (r >= x.rows) continue;
      uint32_t* out = reinterpret_cast<uint32_t*>(p.y + static_cast<size_t>(x.row0 + r) * p.N + x.n0 + 2 * cq);
#pragma unroll
      for (int j = 0; j < 32; ++j) out[4 * j] = pack_bf16(acc[4 * j + 2 * sel], acc[4 * j + 2 * sel + 1]);
    }
  }
}

template <int kTransB>
void run(const char* op, const DeviceContext& ctx, const void* a, const void* w, const int64_t* counts, int64_t E,
         int64_t P, int64_t N, int64_t C, void* y) {
  const std::string why = unsupported_reason(E, N, C, a, w, y);
  QUILL_CHECK(why.empty(), "{} (wgmma): {}", op, why);
  QUILL_CHECK(P < (int64_t{1} << 31) && E * std::max(N, C) < (int64_t{1} << 31),
              "{} (wgmma): {} rows, {} x {} x {} weights are beyond the kernel's 32-bit indexing", op, P, E, N, C);
  Params p{};
  p.a_map = attn_wg::bf16_matrix_map("a_PC", a, std::max<int64_t>(P, 1), C);
  p.w_map = kTransB ? attn_wg::bf16_matrix_map("w_ECN", w, E * C, N) : attn_wg::bf16_matrix_map("w_ENC", w, E * N, C);
  p.y = static_cast<__nv_bfloat16*>(y);
  p.N = static_cast<int>(N), p.C = static_cast<int>(C), p.E = static_cast<int>(E);
  p.k_tiles = static_cast<int>(C / kTileK), p.n_tiles = static_cast<int>(N / kTileCols);
  const int64_t tiles = fill_schedule(counts, E, p.n_tiles, static_cast<int>(kTileRows), p.row_offset, p.tile_offset);
  const int64_t row = p.row_offset[E];
  QUILL_CHECK(row == P, "{} (wgmma): the counts sum to {}, not the {} rows", op, row, P);
  if (tiles == 0) return;
  p.total = static_cast<int>(tiles);
  attn::set_smem(op, reinterpret_cast<const void*>(grouped_gemm_kernel<kTransB>), kSmemBytes);
  const unsigned grid = persistent_ctas(tiles);
  grouped_gemm_kernel<kTransB><<<grid, kThreads, kSmemBytes, stream_of(ctx)>>>(p);
  QUILL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

unsigned persistent_ctas(int64_t tiles) {
  int dev = 0, sms = 0;
  QUILL_CUDA_CHECK(cudaGetDevice(&dev));
  QUILL_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  return static_cast<unsigned>(std::min<int64_t>(tiles, sms));
}

std::string unsupported_reason(int64_t E, int64_t N, int64_t C, const void* a, const void* w, const void* y) {
  if (!attn_wg::device_supported()) return "needs a compute capability 9.0 GPU (sm_90a: wgmma, TMA)";
  if (N % kTileCols != 0) return fmt::format("{} output columns are not a multiple of the kernel's {}", N, kTileCols);
  if (C % kTileK != 0) return fmt::format("a contraction of {} is not a multiple of the kernel's {}", C, kTileK);
  if (E > kMaxExperts) return fmt::format("{} experts, more than the kernel's {}", E, kMaxExperts);
  for (const void* ptr : {a, w, y})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "an operand is not 16-byte aligned (TMA)";
  return "";
}

void forward(const DeviceContext& ctx, const void* a_PC, const void* w_ENC, const int64_t* counts, int64_t E,
             int64_t P, int64_t N, int64_t C, void* y_PN) {
  run<0>("grouped_linear_forward", ctx, a_PC, w_ENC, counts, E, P, N, C, y_PN);
}

void backward_input(const DeviceContext& ctx, const void* a_PC, const void* w_ECN, const int64_t* counts, int64_t E,
                    int64_t P, int64_t N, int64_t C, void* y_PN) {
  run<1>("grouped_linear_backward_input", ctx, a_PC, w_ECN, counts, E, P, N, C, y_PN);
}

}  // namespace quill::cuda::grouped_gemm
