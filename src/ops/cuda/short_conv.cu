// CUDA depthwise causal short convolution with residual (ops/short_conv.h; dtypes:
// docs/decisions/cuda-precision.md).
//   forward:  y[t, c] = x[t, c] + sum_{j<K} w[c, j] * x[t - (K-1) + j, c]       (x[negative] = 0, or the halo)
//   backward: dx[s, c] = dy[s, c] + sum_{j<K} w[c, j] * dy[s + (K-1) - j, c]   (dy[>= T] = 0; overwritten)
//             dhalo[i, c] = sum_{j<K} w[c, j] * dy[i - j, c]                   (0 <= i - j < T; with a halo)
//             dw[c, j] += sum_t dy[t, c] * x[t - (K-1) + j, c]                  (accumulated)
// Legend: T positions of one sequence, C channels, K taps (1..kMaxTaps; Inkling uses 4), H = K - 1 halo rows
// (sequence parallelism: ops/short_conv.h).
// Dtypes: x_TC, y_TC, dy_TC, dx_TC BF16 [T, C]; halo_HC, dhalo_HC BF16 [K-1, C]; w_CK, dw_CK F32 [C, K]. All
// arithmetic fp32, taps added in j order as the CPU reference does; a tap before position 0 reads the halo
// when there is one (added even when zero), a tap outside [0, T) otherwise is skipped (not added as a zero),
// as there.
//
// Layout (one kernel per direction, templated on kW channels per thread and on K):
// - A thread owns kW channels of the row (a unit, bf16_units.cuh): kW = 8 (one 16-byte load or
//   store per row) when C % 8 == 0 and x, y (dy, dx) are 16-byte aligned, else kW = 1.
// - A block of 128 threads is kGroups units across (8 units = 64 channels = 128 bytes of a row for
//   kW = 8; 32 single channels for kW = 1) by kSlices slices along T. A tile is kSlices * kRows
//   consecutive positions, slice s owning kRows of them (kRows = 8 forward, 4 backward at K <= 4).
//   Per tile a thread loads its rows plus the K - 1 rows before them (x) or after them (dy), all
//   loads before any arithmetic (forward: 11 loads of 16 bytes in flight per thread; backward 2 x 7),
//   then computes its rows from registers. The K - 1 extra rows are the neighbouring slice's, read
//   by the same warp or block at the same time (L1/L2 hits): DRAM reads x (and dy) once.
// - Registers decide the occupancy (4 blocks of 128 threads per SM at K <= 4): the window stays
//   packed (4 words per row), taps are read from shared memory per tile, the forward extracts each
//   element where it is used (opaque_elem) and the backward works channel by channel.
// - The grid is (channel blocks, position splits), sized to one resident wave; a block walks a
//   contiguous run of tiles.
// - Backward: dx and dw in one pass. Each thread sums dy * x for its channels and taps over its rows
//   (in position order) in its own row of shared memory; at the end the block's kSlices partial
//   sums are added in slice order into the block's row of a [splits, C*K] scratch, and one more
//   kernel adds the splits' rows in order (ordered_sum.h): the same bits on every run.
// Why: the previous vectorised kernels issued one 16-byte load at a time per thread (a serial walk
// of 16 or 64 rows, 32-thread blocks forward), and the backward's 64-row runs gave the [8192, 1024]
// convolutions fewer threads than the GPU holds; they measured 25-50% of the copy ceiling
// (bench/results/2026-11-30-slice-v5). The scalar fallback divided by C per element and read every
// element K times from global memory.
// - The halo's gradient (a few rows) is one small kernel of its own, a thread per element.
// y must not alias x, nor dx alias dy or x (outputs are written while neighbours are still read).
#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <type_traits>

#include "ops/cuda/bf16_units.cuh"
#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/ordered_sum.h"
#include "ops/cuda/kernels.h"
#include "ops/dispatch.h"

namespace quill::cuda {
namespace {

using ops_detail::require_dtype;
using ops_detail::require_shape;
using units::Bf16Unit;
using units::load_unit;
using units::store_unit;
using units::zero_unit;

constexpr int kMaxTaps = 8;
constexpr int kThreads = 128;

void require_device(const char* op, const char* name, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.device() == Device::CUDA, "{}: {} must be in GPU memory, got {}", op, name,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

// The block's shape, the rows per slice of each direction (registers: the backward holds two
// windows), and the shared-memory row of one thread's kW * K taps or dw sums.
template <int kW, int K>
struct Tiling {
  static constexpr int kGroups = kW == 8 ? 8 : 32;  // units across a block row
  static constexpr int kSlices = kThreads / kGroups;
  static constexpr int kFwdRows = kW == 8 && K > 4 ? 4 : 8;
  static constexpr int kBwdRows = kW == 8 && K > 4 ? 2 : 4;
  static constexpr int kFwdTile = kSlices * kFwdRows;
  static constexpr int kBwdTile = kSlices * kBwdRows;
  static constexpr int kSums = kW * K;
  // 16-byte shared accesses when a channel's K floats are 16-byte aligned; the row stride (in
  // floats) keeps the 8 threads of one such access, or the 32 of a 4-byte access, on distinct banks.
  static constexpr bool kVecShared = kW == 8 && K % 4 == 0;
  static constexpr int kStride = kVecShared ? kSums + 4 : (kSums | 1);
  // Minimum resident blocks per SM for __launch_bounds__: 4 (<= 128 registers); for kW = 8 with
  // more than 4 taps 3 forward (<= 168) and 2 backward (<= 255). ptxas reports no spills at these
  // limits (sm_90a, CUDA 13.0).
  static constexpr int kFwdMinBlocks = kW == 8 && K > 4 ? 3 : 4;
  static constexpr int kBwdMinBlocks = kW == 8 && K > 4 ? 2 : 4;
};

// Element i of a unit as fp32, through an opaque instruction: the compiler then cannot merge the
// extractions of one element across the rows that reuse it, which would keep every row of the
// window unpacked (8 floats instead of 4 words per row: 128+ registers at K = 4).
__device__ __forceinline__ float opaque_elem(const Bf16Unit<8>& u, int i) {
  const uint32_t w = (i >> 1) == 0 ? u.bits.x : (i >> 1) == 1 ? u.bits.y : (i >> 1) == 2 ? u.bits.z : u.bits.w;
  float f;
  if (i & 1) asm volatile("and.b32 %0, %1, 0xffff0000;" : "=f"(f) : "r"(w));
  else asm volatile("shl.b32 %0, %1, 16;" : "=f"(f) : "r"(w));
  return f;
}
__device__ __forceinline__ float opaque_elem(const Bf16Unit<1>& u, int) { return u[0]; }

// kW outputs of one row set channel by channel (ch a compile-time constant after unrolling), rounded
// to bf16 in pairs as they complete (4 words, not 8 floats, per pending row); stored as one unit.
template <int kW>
struct OutUnit;
template <>
struct OutUnit<8> {
  uint32_t w[4];
  float even;
  __device__ __forceinline__ void set(int ch, float v) {
    if (ch % 2 == 0) even = v;
    else w[ch / 2] = units::pack_bf16x2(even, v);
  }
  __device__ __forceinline__ void store(__nv_bfloat16* p) const {
    store_unit<8>(p, Bf16Unit<8>{make_uint4(w[0], w[1], w[2], w[3])});
  }
};
template <>
struct OutUnit<1> {
  float v;
  __device__ __forceinline__ void set(int, float value) { v = value; }
  __device__ __forceinline__ void store(__nv_bfloat16* p) const {
    const float out[1] = {v};
    store_unit<1>(p, out);
  }
};

// K floats at p (one channel's taps or dw sums in shared memory) to or from registers.
template <int K, bool kVec>
__device__ __forceinline__ void load_k(float (&v)[K], const float* p) {
  if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < K; j += 4) {
      const float4 q = *reinterpret_cast<const float4*>(p + j);
      v[j] = q.x, v[j + 1] = q.y, v[j + 2] = q.z, v[j + 3] = q.w;
    }
  } else {
#pragma unroll
    for (int j = 0; j < K; ++j) v[j] = p[j];
  }
}
template <int K, bool kVec>
__device__ __forceinline__ void store_k(float* p, const float (&v)[K]) {
  if constexpr (kVec) {
#pragma unroll
    for (int j = 0; j < K; j += 4) *reinterpret_cast<float4*>(p + j) = make_float4(v[j], v[j + 1], v[j + 2], v[j + 3]);
  } else {
#pragma unroll
    for (int j = 0; j < K; ++j) p[j] = v[j];
  }
}

// out[i] = the thread's unit of row first + i (base points at the thread's channels of row 0); for a row
// before 0 the halo's row H + r when there is one (halo points at the thread's channels of halo row 0, or is
// nullptr); zero for any other row outside [0, T).
template <int kW, int n>
__device__ __forceinline__ void load_rows(Bf16Unit<kW> (&out)[n], const __nv_bfloat16* __restrict__ base, int64_t first,
                                          int64_t T, int64_t C, const __nv_bfloat16* __restrict__ halo = nullptr,
                                          int64_t H = 0) {
#pragma unroll
  for (int i = 0; i < n; ++i) {
    const int64_t r = first + i;
    if (r >= 0) out[i] = r < T ? load_unit<kW>(base + r * C) : zero_unit<kW>();
    else out[i] = halo != nullptr && H + r >= 0 ? load_unit<kW>(halo + (H + r) * C) : zero_unit<kW>();
  }
}

// Forward of rows a .. a + U - 1 from win[i] = x[a - (K-1) + i]; y points at row a, wt at the
// thread's taps in shared memory (read per tile: the taps then take no registers while the window's
// loads are in flight). kEdge: some row is at or past T, or some tap before 0 (checked per row and
// tap; interior tiles skip the checks); with a halo, taps before 0 are added (the window holds its rows).
template <int kW, int K, int U, bool kEdge>
__device__ __forceinline__ void forward_rows(const Bf16Unit<kW> (&win)[U + K - 1], const float* wt, int64_t a,
                                             int64_t T, int64_t C, bool has_halo, __nv_bfloat16* __restrict__ y) {
  using Tl = Tiling<kW, K>;
  float wr[kW][K];
#pragma unroll
  for (int ch = 0; ch < kW; ++ch) load_k<K, Tl::kVecShared>(wr[ch], wt + ch * K);
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (kEdge && a + u >= T) break;
    float out[kW];
#pragma unroll
    for (int ch = 0; ch < kW; ++ch) {
      float acc = opaque_elem(win[u + K - 1], ch);
#pragma unroll
      for (int j = 0; j < K; ++j)
        if (!kEdge || has_halo || a + u - (K - 1) + j >= 0) acc += wr[ch][j] * opaque_elem(win[u + j], ch);
      out[ch] = acc;
    }
    store_unit<kW>(y + u * C, out);
  }
}

// The block's taps: wsh[gg * kStride + ch * K + j] = w[c, j] for channel c = (blockIdx.x * kGroups
// + gg) * kW + ch (0 past C). The caller synchronises before reading them.
template <int kW, int K>
__device__ __forceinline__ void stage_taps(float* wsh, const float* __restrict__ w, int64_t C) {
  using Tl = Tiling<kW, K>;
  const int64_t w0 = int64_t(blockIdx.x) * Tl::kGroups * Tl::kSums;
  for (int i = threadIdx.x; i < Tl::kGroups * Tl::kSums; i += kThreads)
    wsh[(i / Tl::kSums) * Tl::kStride + i % Tl::kSums] = w0 + i < C * K ? w[w0 + i] : 0.0f;
}

// Grid (channel blocks, splits), block kThreads: thread (g, s) = (threadIdx.x % kGroups, / kGroups)
// owns channels [c0, c0 + kW) and, in every tile of its block's run, the kFwdRows rows of slice s.
template <int kW, int K>
__global__ void __launch_bounds__(kThreads, Tiling<kW, K>::kFwdMinBlocks)
    short_conv_forward_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ halo,
                              const float* __restrict__ w, int64_t T, int64_t C, int64_t tiles_per_block,
                              __nv_bfloat16* __restrict__ y) {
  using Tl = Tiling<kW, K>;
  constexpr int U = Tl::kFwdRows;
  __shared__ __align__(16) float wsh[Tl::kGroups * Tl::kStride];  // [group][kSums]
  stage_taps<kW, K>(wsh, w, C);
  __syncthreads();
  const int g = threadIdx.x % Tl::kGroups, s = threadIdx.x / Tl::kGroups;
  const int64_t c0 = (int64_t(blockIdx.x) * Tl::kGroups + g) * kW;
  if (c0 >= C) return;  // no barrier below
  const float* wt = wsh + g * Tl::kStride;
  const int64_t first_tile = int64_t(blockIdx.y) * tiles_per_block;
  const int64_t end_tile = min((T + Tl::kFwdTile - 1) / Tl::kFwdTile, first_tile + tiles_per_block);
  for (int64_t tile = first_tile; tile < end_tile; ++tile) {
    const int64_t a = tile * Tl::kFwdTile + int64_t(s) * U;  // the slice's first row
    if (a >= T) break;
    Bf16Unit<kW> win[U + K - 1];
    load_rows<kW, U + K - 1>(win, x + c0, a - (K - 1), T, C, halo != nullptr ? halo + c0 : nullptr, K - 1);
    if (a >= K - 1 && a + U <= T) forward_rows<kW, K, U, false>(win, wt, a, T, C, false, y + a * C + c0);
    else forward_rows<kW, K, U, true>(win, wt, a, T, C, halo != nullptr, y + a * C + c0);
  }
}

// Backward of rows a .. a + U - 1 from xw[i] = x[a - (K-1) + i] and gw[i] = dy[a + i]: dx rows
// stored at dx (row a); the dw sums read from and written back to dws (the thread's kW * K sums in
// shared memory), one channel's K at a time, with that channel's taps from wt. Channel by channel,
// so that only one channel's columns of the two windows are unpacked at a time. kEdge as in
// forward_rows (rows past T, taps of dx at or past T, taps of dw before 0 unless there is a halo).
template <int kW, int K, int U, bool kEdge>
__device__ __forceinline__ void backward_rows(const Bf16Unit<kW> (&xw)[U + K - 1], const Bf16Unit<kW> (&gw)[U + K - 1],
                                              const float* wt, float* dws, int64_t a, int64_t T, int64_t C,
                                              bool has_halo, __nv_bfloat16* __restrict__ dx) {
  using Tl = Tiling<kW, K>;
  OutUnit<kW> out[U];
#pragma unroll
  for (int ch = 0; ch < kW; ++ch) {
    float wc[K], dwc[K], xcol[U + K - 1], gcol[U + K - 1];
    load_k<K, Tl::kVecShared>(wc, wt + ch * K);
    load_k<K, Tl::kVecShared>(dwc, dws + ch * K);
#pragma unroll
    for (int i = 0; i < U + K - 1; ++i) {
      xcol[i] = xw[i][ch];
      gcol[i] = gw[i][ch];
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const float g0 = gcol[u];
      float acc = g0;
#pragma unroll
      for (int j = 0; j < K; ++j)
        if (!kEdge || a + u + (K - 1) - j < T) acc += wc[j] * gcol[u + K - 1 - j];
      out[u].set(ch, acc);
      if (kEdge && a + u >= T) continue;
#pragma unroll
      for (int j = 0; j < K; ++j)
        if (!kEdge || has_halo || a + u - (K - 1) + j >= 0) dwc[j] = fmaf(g0, xcol[u + j], dwc[j]);
    }
    store_k<K, Tl::kVecShared>(dws + ch * K, dwc);
  }
#pragma unroll
  for (int u = 0; u < U; ++u) {
    if (kEdge && a + u >= T) break;
    out[u].store(dx + u * C);
  }
}

// Same grid and thread layout as the forward, with kBwdRows rows per slice. The block's taps are
// staged in wsh; each thread's dw sums live in its row of part (touched only by that thread until
// the final barrier).
template <int kW, int K>
__global__ void __launch_bounds__(kThreads, Tiling<kW, K>::kBwdMinBlocks)
    short_conv_backward_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ halo,
                               const float* __restrict__ w, const __nv_bfloat16* __restrict__ dy, int64_t T, int64_t C,
                               int64_t tiles_per_block,
                               __nv_bfloat16* __restrict__ dx, float* __restrict__ partials, bool dw_aligned16) {
  using Tl = Tiling<kW, K>;
  constexpr int U = Tl::kBwdRows;
  __shared__ __align__(16) float wsh[Tl::kGroups * Tl::kStride];                 // [group][kSums]
  __shared__ __align__(16) float part[Tl::kSlices * Tl::kGroups * Tl::kStride];  // [slice][group][kSums]
  stage_taps<kW, K>(wsh, w, C);
  const int g = threadIdx.x % Tl::kGroups, s = threadIdx.x / Tl::kGroups;
  const int64_t c0 = (int64_t(blockIdx.x) * Tl::kGroups + g) * kW;
  const float* wt = wsh + g * Tl::kStride;
  float* dws = part + threadIdx.x * Tl::kStride;  // threadIdx.x = s * kGroups + g
#pragma unroll
  for (int e = 0; e < Tl::kSums; ++e) dws[e] = 0.0f;
  __syncthreads();  // wsh
  const int64_t first_tile = int64_t(blockIdx.y) * tiles_per_block;
  const int64_t end_tile = min((T + Tl::kBwdTile - 1) / Tl::kBwdTile, first_tile + tiles_per_block);
  for (int64_t tile = first_tile; c0 < C && tile < end_tile; ++tile) {
    const int64_t a = tile * Tl::kBwdTile + int64_t(s) * U;
    if (a >= T) break;
    Bf16Unit<kW> xw[U + K - 1], gw[U + K - 1];
    load_rows<kW, U + K - 1>(xw, x + c0, a - (K - 1), T, C, halo != nullptr ? halo + c0 : nullptr, K - 1);
    load_rows<kW, U + K - 1>(gw, dy + c0, a, T, C);
    if (a >= K - 1 && a + U + K - 1 <= T)
      backward_rows<kW, K, U, false>(xw, gw, wt, dws, a, T, C, false, dx + a * C + c0);
    else backward_rows<kW, K, U, true>(xw, gw, wt, dws, a, T, C, halo != nullptr, dx + a * C + c0);
  }
  // The block's sums over its slices, in slice order, into row blockIdx.y of `partials` [splits,
  // C*K] (the tile splits' rows are added in split order afterwards, ordered_sum.h: no float
  // atomics, the same bits every run); four at a time (one 16-byte store) when the rows are 16-byte
  // aligned and kW = 8. Entry e of group gg is channel (blockIdx.x * kGroups + gg) * kW + e / K, tap
  // e % K: dw index (blockIdx.x * kGroups + gg) * kSums + e, consecutive over the loop.
  __syncthreads();
  const bool quads = kW == 8 && dw_aligned16;  // kSums = 8K: quads never straddle a group
  float* dw = partials + int64_t(blockIdx.y) * C * K;
  const int step = quads ? 4 : 1;
  for (int i = threadIdx.x * step; i < Tl::kGroups * Tl::kSums; i += kThreads * step) {
    const int gg = i / Tl::kSums, e = i % Tl::kSums;
    const int64_t group = int64_t(blockIdx.x) * Tl::kGroups + gg;
    if (group * kW >= C) break;  // every later i is a later group
    const float* col = part + gg * Tl::kStride + e;
    if (quads) {
      float4 sum = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int q = 0; q < Tl::kSlices; ++q) {
        const float* p = col + q * Tl::kGroups * Tl::kStride;
        sum.x += p[0], sum.y += p[1], sum.z += p[2], sum.w += p[3];
      }
      *reinterpret_cast<float4*>(dw + group * Tl::kSums + e) = sum;
    } else {
      float sum = 0.0f;
#pragma unroll
      for (int q = 0; q < Tl::kSlices; ++q) sum += col[q * Tl::kGroups * Tl::kStride];
      dw[group * Tl::kSums + e] = sum;
    }
  }
}

// dhalo[i, c] = sum over taps j (in order) with 0 <= i - j < T of w[c, j] * dy[i - j, c]: the halo position
// i - H read by output i - j through tap j. One thread per element of the [H, C] halo.
__global__ void short_conv_halo_grad_kernel(const float* __restrict__ w, const __nv_bfloat16* __restrict__ dy,
                                            int64_t T, int64_t C, int K, __nv_bfloat16* __restrict__ dhalo) {
  const int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= int64_t(K - 1) * C) return;
  const int64_t i = e / C, c = e % C;
  float acc = 0.0f;
  for (int j = 0; j < K; ++j) {
    const int64_t t = i - j;
    if (t >= 0 && t < T) acc += w[c * K + j] * __bfloat162float(dy[t * C + c]);
  }
  dhalo[e] = __float2bfloat16_rn(acc);
}

// Grid of one resident wave: the channel blocks times as many splits of the tiles as fit (at least
// one), each split a contiguous run of tiles_per_block tiles.
struct TiledGrid {
  dim3 grid;
  int64_t tiles_per_block = 0;
};

template <typename Kernel>
TiledGrid tiled_grid(const DeviceContext& ctx, Kernel kernel, int64_t T, int64_t C, int kW, int groups, int tile_rows) {
  const int64_t channel_blocks = units::ceil_div(C / kW, groups);
  const int64_t tiles = units::ceil_div(T, tile_rows);
  const int64_t wave = units::resident_blocks(kernel, kThreads, 0, ctx.cuda->device, INT64_MAX);
  const int64_t splits = std::clamp<int64_t>(wave / channel_blocks, 1, tiles);
  TiledGrid g;
  g.tiles_per_block = units::ceil_div(tiles, splits);
  g.grid = dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(units::ceil_div(tiles, g.tiles_per_block)));
  return g;
}

// The halo's data, or nullptr without one (an undefined tensor, or K = 1: no rows).
const __nv_bfloat16* halo_data(const Tensor& halo) {
  return halo.defined() && halo.numel() > 0 ? halo.data_as<__nv_bfloat16>() : nullptr;
}

template <int kW, int K>
void launch_forward(const DeviceContext& ctx, const Tensor& x, const Tensor& halo, const Tensor& w, const Tensor& y,
                    int64_t T, int64_t C) {
  using Tl = Tiling<kW, K>;
  const TiledGrid g = tiled_grid(ctx, short_conv_forward_kernel<kW, K>, T, C, kW, Tl::kGroups, Tl::kFwdTile);
  short_conv_forward_kernel<kW, K><<<g.grid, kThreads, 0, stream_of(ctx)>>>(
      x.data_as<__nv_bfloat16>(), halo_data(halo), w.data_as<float>(), T, C, g.tiles_per_block,
      y.data_as<__nv_bfloat16>());
}

template <int kW, int K>
void launch_backward(const DeviceContext& ctx, const Tensor& x, const Tensor& halo, const Tensor& w, const Tensor& dy,
                     const Tensor& dx, const Tensor& dw, int64_t T, int64_t C) {
  using Tl = Tiling<kW, K>;
  const TiledGrid g = tiled_grid(ctx, short_conv_backward_kernel<kW, K>, T, C, kW, Tl::kGroups, Tl::kBwdTile);
  Tensor partials = Tensor::empty({static_cast<int64_t>(g.grid.y), C * K}, DType::F32, *ctx.allocator);
  short_conv_backward_kernel<kW, K><<<g.grid, kThreads, 0, stream_of(ctx)>>>(
      x.data_as<__nv_bfloat16>(), halo_data(halo), w.data_as<float>(), dy.data_as<__nv_bfloat16>(), T, C,
      g.tiles_per_block,
      dx.data_as<__nv_bfloat16>(), partials.data_as<float>(), units::aligned16(partials.data()) && (C * K) % 4 == 0);
  add_partials_in_order(stream_of(ctx), partials.data_as<float>(), g.grid.y, C * K, dw.data_as<float>());
}

// Calls f(std::integral_constant<int, K>{}) for K in 1..kMaxTaps (every tap count the op accepts).
template <typename F>
void with_taps(int K, F&& f) {
  switch (K) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 3: return f(std::integral_constant<int, 3>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 5: return f(std::integral_constant<int, 5>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 7: return f(std::integral_constant<int, 7>{});
    default: return f(std::integral_constant<int, 8>{});
  }
}

// The 16-byte path: 8 channels per thread when C allows it and every bf16 tensor is 16-byte aligned.
bool vec_path(int64_t C, std::initializer_list<const void*> ptrs) {
  if (C % units::kVec != 0) return false;
  for (const void* p : ptrs)
    if (!units::aligned16(p)) return false;
  return true;
}

void check_2d(const char* op, const char* name, const char* dims, const Tensor& t) {
  QUILL_CHECK(t.defined() && t.ndim() == 2, "{}: {} must be 2-D {}, got {}", op, name, dims,
              t.defined() ? t.describe() : std::string("(undefined)"));
}

// Shared checks of x and w; returns K.
int check_x_w(const char* op, const Tensor& x_TC, const Tensor& w_CK) {
  check_2d(op, "x", "[T, C]", x_TC);
  check_2d(op, "w", "[C, K]", w_CK);
  const int64_t C = x_TC.dim(1), K = w_CK.dim(1);
  QUILL_CHECK(K >= 1 && K <= kMaxTaps, "{}: w has {} taps (shape {}); the CUDA kernel supports 1..{}", op, K,
              shape_str(w_CK.shape()), kMaxTaps);
  require_shape(op, "w", w_CK, {C, K});
  require_dtype(op, "x", x_TC, DType::BF16);
  require_dtype(op, "w", w_CK, DType::F32);
  require_device(op, "x", x_TC);
  require_device(op, "w", w_CK);
  return static_cast<int>(K);
}

}  // namespace

void short_conv_forward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& y_TC,
                        const Tensor& halo_HC) {
  const char* op = "short_conv_forward";
  const int K = check_x_w(op, x_TC, w_CK);
  require_shape(op, "y", y_TC, x_TC.shape());
  require_dtype(op, "y", y_TC, DType::BF16);
  require_device(op, "y", y_TC);
  QUILL_CHECK(y_TC.data() != x_TC.data() || x_TC.numel() == 0, "{}: y must not alias x", op);
  ops_detail::require_conv_halo_input(op, x_TC, K, y_TC, halo_HC);
  if (halo_HC.defined()) require_device(op, "halo", halo_HC);
  const int64_t T = x_TC.dim(0), C = x_TC.dim(1);
  if (T * C == 0) return;
  const bool vec = vec_path(C, {x_TC.data(), y_TC.data(), halo_data(halo_HC)});
  with_taps(K, [&](auto taps) {
    constexpr int KT = decltype(taps)::value;
    if (vec) launch_forward<units::kVec, KT>(ctx, x_TC, halo_HC, w_CK, y_TC, T, C);
    else launch_forward<1, KT>(ctx, x_TC, halo_HC, w_CK, y_TC, T, C);
  });
  QUILL_CUDA_CHECK_LAUNCH("short_conv_forward_kernel");
}

void short_conv_backward(const DeviceContext& ctx, const Tensor& x_TC, const Tensor& w_CK, const Tensor& dy_TC,
                         const Tensor& dx_TC, const Tensor& dw_CK, const Tensor& halo_HC, const Tensor& dhalo_HC) {
  const char* op = "short_conv_backward";
  const int K = check_x_w(op, x_TC, w_CK);
  require_shape(op, "dy", dy_TC, x_TC.shape());
  require_shape(op, "dx", dx_TC, x_TC.shape());
  require_shape(op, "dw", dw_CK, w_CK.shape());
  require_dtype(op, "dy", dy_TC, DType::BF16);
  require_dtype(op, "dx", dx_TC, DType::BF16);
  require_dtype(op, "dw", dw_CK, DType::F32);
  require_device(op, "dy", dy_TC);
  require_device(op, "dx", dx_TC);
  require_device(op, "dw", dw_CK);
  QUILL_CHECK((dx_TC.data() != dy_TC.data() && dx_TC.data() != x_TC.data()) || x_TC.numel() == 0,
              "{}: dx must not alias dy or x", op);
  ops_detail::require_conv_halo_pair(op, x_TC, K, dy_TC, dx_TC, halo_HC, dhalo_HC);
  if (halo_HC.defined()) {
    require_device(op, "halo", halo_HC);
    require_device(op, "dhalo", dhalo_HC);
  }
  const int64_t T = x_TC.dim(0), C = x_TC.dim(1);
  const cudaStream_t stream = stream_of(ctx);
  if (halo_data(dhalo_HC) != nullptr) {
    const int64_t n = dhalo_HC.numel();
    short_conv_halo_grad_kernel<<<static_cast<unsigned>(units::ceil_div(n, 256)), 256, 0, stream>>>(
        w_CK.data_as<float>(), dy_TC.data_as<__nv_bfloat16>(), T, C, K, dhalo_HC.data_as<__nv_bfloat16>());
    QUILL_CUDA_CHECK_LAUNCH("short_conv_halo_grad_kernel");
  }
  if (T * C == 0) return;
  const bool vec = vec_path(C, {x_TC.data(), dy_TC.data(), dx_TC.data(), halo_data(halo_HC)});
  with_taps(K, [&](auto taps) {
    constexpr int KT = decltype(taps)::value;
    if (vec) launch_backward<units::kVec, KT>(ctx, x_TC, halo_HC, w_CK, dy_TC, dx_TC, dw_CK, T, C);
    else launch_backward<1, KT>(ctx, x_TC, halo_HC, w_CK, dy_TC, dx_TC, dw_CK, T, C);
  });
  QUILL_CUDA_CHECK_LAUNCH("short_conv_backward_kernel");
}

}  // namespace quill::cuda
