// The routed experts' FP8 forward and input-gradient GEMMs (blockwise-scaled E4M3) as one persistent launch for
// every expert (grouped_gemm_wg.h says what and why; the bf16 kernel, grouped_gemm_wg.cu, is the same pipeline).
//
// A CTA (one per multiprocessor) is two consumer warpgroups and one producer warp (288 threads); it walks the tiles
// (128 rows of one expert x 128 output columns, one weight block wide) of every expert in the schedule of
// grouped_gemm_schedule.h. Per 128-wide slice of the contraction (one scale block), lane 0 of the producer warp waits
// for a free stage (kStages deep, across tiles) and loads into it by TMA the activation codes (128 rows x 128 bytes,
// two 64-row boxes, 128-byte swizzle; rows from the expert's first padded row, so past its rows come its zero padding
// or the next expert's rows, never stored) and the weight codes (128 x 128 bytes, two boxes), counted in bytes on the
// stage's full barrier. Each consumer warpgroup multiplies its 64 rows by the 128 columns with four wgmma
// m64n128k32 (e4m3, both operands K-major from shared memory) into a fresh fp32 product, waits for it, releases the
// stage and adds product x row factor x block factor into its fp32 accumulator. The epilogue rounds to bf16 and
// stores the expert's real rows at their source rows (no padded output, no copy back).
//
// The row factors of each slice travel in its stage (min(128, padded rows - m0) of them, a multiple of 16, by a bulk
// copy on the stage's full barrier), and each thread reads its two from shared memory right after the stage's wait,
// before the MMA is issued, as DeepGEMM's FP8 GEMM does ("all shared memory read must be prior to warpgroup_arrive to
// avoid next scheduled block polluting the results"). A first form read them after the MMA's wait, and a few 16-row
// warp slices of a few tiles per launch came out wrong, differently from run to run (the slice's shapes on an H100,
// 2026-12-07: up to 45 of 49,457 rows; GroupedGemmWgmma.Fp8SliceShapedAgainstCublasLt). Loading them from global
// memory instead was right but 13-18% slower; this form is right (cuBLASLt's bits three runs out of three at the
// slice's shapes) and 12-16% faster than that (H100, bench/results/2026-12-07-h100-fp8-factors-close).
// Measured and deleted: a form that issued each slice's MMA before the previous product was scaled in (two products
// a warpgroup, a producer warpgroup giving its registers by setmaxnreg): 3.5% slower over the four ops at the
// slice's counts, 0.9% faster at a seed rank's (bench/results/2026-12-07-h100-close-call).
// docs/decisions/grouped-gemm-wgmma.md.
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

constexpr int kStages = 6;
constexpr int kConsumerThreads = 256;
constexpr int kThreads = kConsumerThreads + 32;  // + the producer warp
constexpr int kRows = static_cast<int>(kTileRows);
constexpr int kCols = static_cast<int>(kFp8TileCols);
constexpr int kBoxes = kRows / 64;                               // A's and B's 64-row boxes of 128 bytes
constexpr int kCodeBytes = 2 * kBoxes * kBoxBytes;               // A and B codes of a stage: 32 KiB
constexpr int kScaleBytes = kRows * 4;                           // a stage's row factors
constexpr int kSmemScales = kStages * kCodeBytes;
constexpr int kSmemBarriers = kSmemScales + kStages * kScaleBytes;
constexpr int kSmemBytes = kSmemBarriers + 16 * kStages + 1024;  // full and empty barriers, alignment slack
static_assert(kFp8TileK == kRowBytes, "grouped_gemm fp8: a stage is one 128-byte box wide");
static_assert(kCols == kRows, "grouped_gemm fp8: B's boxes are A's");
static_assert(kSmemBytes <= kSmemLimit, "grouped_gemm fp8: shared memory over the sm_90 limit");

struct Params {
  CUtensorMap a_map;  // activation codes [Np, C] as 64 x 128-byte boxes
  CUtensorMap w_map;  // weight codes [E N, C], the same boxes
  const float* a_scale;  // rows128 factors (fp8_quantize.h): group g's [C/128, padded rows] at (C/128) dst[g]
  const float* w_scale;  // [E, N/128, w_ld]
  __nv_bfloat16* y;      // [source rows, N]
  int N, C, E, k_tiles, n_tiles, w_ld, total;
  int src[kMaxExperts + 1];          // group g's source rows [src[g], src[g + 1])
  int dst[kMaxExperts + 1];          // and padded rows [dst[g], dst[g + 1])
  int tile_offset[kMaxExperts + 1];  // its tiles [tile_offset[g], tile_offset[g + 1])
};

// d (64 x 128, fp32) = (scale_d ? d : 0) + A (64 x 32 e4m3, shared memory) . B (32 x 128 e4m3, shared memory), both
// K-major (FP8 wgmma takes no other).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3(float (&d)[64], uint64_t a_desc, uint64_t b_desc, int scale_d) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "%64, %65, p, 1, 1;\n"
      "}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "l"(a_desc), "l"(b_desc), "r"(scale_d));
}

__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(dst),
               "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar)
               : "memory");
}

__device__ __forceinline__ Tile tile_of(const Params& p, int t) {
  return tile_at(p.src, p.tile_offset, p.E, kRows, kCols, t);
}

__global__ void __launch_bounds__(kThreads, 1) grouped_gemm_fp8_kernel(const __grid_constant__ Params p) {
  extern __shared__ __align__(1024) uint8_t smem_raw[];
  const uint32_t base = (smem_u32(smem_raw) + 1023u) & ~1023u;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const StageBarriers bars{base + kSmemBarriers, kStages};
  auto codes = [&](int s) { return base + s * kCodeBytes; };
  auto scales = [&](int s) { return base + kSmemScales + s * kScaleBytes; };

  if (tid == 0) bars.init(kConsumerThreads / 32);
  __syncthreads();

  if (warp == kConsumerThreads / 32) {  // the producer warp
    if (lane == 0) {
      tma_prefetch_descriptor(&p.a_map);
      tma_prefetch_descriptor(&p.w_map);
      int it = 0;
      for (int t = blockIdx.x; t < p.total; t += gridDim.x) {
        const Tile x = tile_of(p, t);
        const int pad_rows = p.dst[x.e + 1] - p.dst[x.e];
        const uint32_t sbytes = static_cast<uint32_t>(min(kRows, pad_rows - x.m0)) * 4u;
        const float* srow = p.a_scale + static_cast<size_t>(p.k_tiles) * p.dst[x.e] + x.m0;
        for (int kt = 0; kt < p.k_tiles; ++kt, ++it) {
          const int s = it % kStages;
          bars.wait_free(it);
          const uint32_t full = bars.full(s);
          mbar_arrive_expect_tx(full, kCodeBytes + sbytes);
          const int k0 = kt * static_cast<int>(kFp8TileK);
#pragma unroll
          for (int j = 0; j < kBoxes; ++j) {
            tma_load_3d(codes(s) + j * kBoxBytes, &p.a_map, full, k0, p.dst[x.e] + x.m0 + 64 * j, 0);
            tma_load_3d(codes(s) + (kBoxes + j) * kBoxBytes, &p.w_map, full, k0, x.e * p.N + x.n0 + 64 * j, 0);
          }
          bulk_load(scales(s), srow + static_cast<size_t>(kt) * pad_rows, sbytes, full);
        }
      }
    }
    return;
  }

  const int w = warp / 4, g = lane >> 2, cq = lane & 3;
  const int r0 = 64 * w + 16 * (warp % 4) + g;  // this thread's rows of the tile: r0 and r0 + 8
  int it = 0;
  for (int t = blockIdx.x; t < p.total; t += gridDim.x) {
    const Tile x = tile_of(p, t);
    const float* wsc = p.w_scale + (static_cast<size_t>(x.e) * p.n_tiles + x.n0 / kCols) * p.w_ld;
    float acc[64], prod[64];
#pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.f;
    for (int kt = 0; kt < p.k_tiles; ++kt, ++it) {
      const int s = it % kStages;
      const float wf = __ldg(wsc + kt);
      bars.wait_full(it);
      // Both factors read before the MMA is issued (the header); rows past the copied factors are never stored.
      const float* sf = reinterpret_cast<const float*>(smem_raw + (scales(s) - smem_u32(smem_raw)));
      const float fa = sf[r0], fb = sf[r0 + 8];
      const uint64_t da = k_major_desc(codes(s) + w * kBoxBytes);
      const uint64_t db = k_major_desc(codes(s) + kBoxes * kBoxBytes);
      fence_regs(prod);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < 4; ++kk)  // 32 e4m3 of the contraction are 32 bytes along the row
        wgmma_m64n128k32_e4m3(prod, da + ((kk * 32) >> 4), db + ((kk * 32) >> 4), kk > 0 ? 1 : 0);
      wgmma_commit();
      wgmma_wait<0>();
      fence_regs(prod);
      const float f0 = fa * wf, f1 = fb * wf;
      __syncwarp();
      if (lane == 0) mbar_arrive(bars.empty(s));
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        acc[4 * j] = fmaf(prod[4 * j], f0, acc[4 * j]);
        acc[4 * j + 1] = fmaf(prod[4 * j + 1], f0, acc[4 * j + 1]);
        acc[4 * j + 2] = fmaf(prod[4 * j + 2], f1, acc[4 * j + 2]);
        acc[4 * j + 3] = fmaf(prod[4 * j + 3], f1, acc[4 * j + 3]);
      }
    }
    // Accumulator 4 j + 2 sel (+1) is row r0 + 8 sel of the tile, columns 8 j + 2 cq (+1).
#pragma unroll
    for (int sel = 0; sel < 2; ++sel) {
      const int r = x.m0 + r0 + 8 * sel;
      if (r >= x.rows) continue;
      uint32_t* out = reinterpret_cast<uint32_t*>(p.y + static_cast<size_t>(x.row0 + r) * p.N + x.n0 + 2 * cq);
#pragma unroll
      for (int j = 0; j < 16; ++j) out[4 * j] = pack_bf16(acc[4 * j + 2 * sel], acc[4 * j + 2 * sel + 1]);
    }
  }
}

}  // namespace

std::string fp8_unsupported_reason(int64_t E, int64_t N, int64_t C, const void* a_codes, const void* w_codes,
                                   const void* y) {
  if (!attn_wg::device_supported()) return "needs a compute capability 9.0 GPU (sm_90a: wgmma, TMA)";
  if (N % kFp8TileCols != 0)
    return fmt::format("{} output columns are not a multiple of the kernel's {}", N, kFp8TileCols);
  if (C <= 0 || C % kFp8TileK != 0)  // (an empty contraction has no slice to promote)
    return fmt::format("a contraction of {} is not a positive multiple of the kernel's {}", C, kFp8TileK);
  if (E > kMaxExperts) return fmt::format("{} experts, more than the kernel's {}", E, kMaxExperts);
  for (const void* ptr : {a_codes, w_codes, y})
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "an operand is not 16-byte aligned (TMA)";
  return "";
}

void fp8_forward(const DeviceContext& ctx, const uint8_t* a_codes, const float* a_scale, const fp8q::RowGroups& groups,
                 const uint8_t* w_codes, const float* w_scale, int64_t N, int64_t C, void* y) {
  const char* op = "fp8 grouped GEMM (wgmma)";
  const int64_t E = groups.count;
  const std::string why = fp8_unsupported_reason(E, N, C, a_codes, w_codes, y);
  QUILL_CHECK(why.empty(), "{}: {}", op, why);
  QUILL_CHECK(E * N < (int64_t{1} << 31) && groups.padded_total() * C < (int64_t{1} << 40),
              "{}: {} x {} weight rows are beyond the kernel's 32-bit indexing", op, E, N);
  Params p{};
  p.a_map = attn_wg::u8_matrix_map("the activation codes", a_codes, std::max<int64_t>(groups.padded_total(), 1), C);
  p.w_map = attn_wg::u8_matrix_map("the weight codes", w_codes, E * N, C);
  p.a_scale = a_scale;
  p.w_scale = w_scale;
  p.y = static_cast<__nv_bfloat16*>(y);
  p.N = static_cast<int>(N), p.C = static_cast<int>(C), p.E = static_cast<int>(E);
  p.k_tiles = static_cast<int>(C / kFp8TileK), p.n_tiles = static_cast<int>(N / kFp8TileCols);
  p.w_ld = static_cast<int>((p.k_tiles + 3) / 4 * 4);
  int64_t counts[kMaxExperts];
  for (int64_t e = 0; e < E; ++e) {
    counts[e] = groups.rows(static_cast<int>(e));
    p.dst[e] = groups.dst[e];
  }
  p.dst[E] = groups.dst[E];
  const int64_t tiles = fill_schedule(counts, E, p.n_tiles, kRows, p.src, p.tile_offset);
  if (tiles == 0) return;
  p.total = static_cast<int>(tiles);
  const unsigned grid = persistent_ctas(tiles);
  attn::set_smem(op, reinterpret_cast<const void*>(grouped_gemm_fp8_kernel), kSmemBytes);
  grouped_gemm_fp8_kernel<<<grid, kThreads, kSmemBytes, stream_of(ctx)>>>(p);
  QUILL_CUDA_CHECK(cudaGetLastError());
}

}  // namespace quill::cuda::grouped_gemm
