// The FP8 quantisation kernels (fp8_quantize.h). Each computes a tile's amax and non-finite flag, the
// power-of-two scale exactly as fp8::block_scale does on the host (__fdiv_rn(448, amax), an infinite
// quotient clamped to FLT_MAX, the mantissa cleared; amax 0 gives 1, a non-finite element NaN), and the
// codes with the hardware's saturating cast (cvt.rn.satfinite.e4m3x2.f32), which the host's
// fp8::e4m3_from_float reproduces: the tests (tests/cuda/fp8_test.cc) compare codes and factors bit for bit.
// Performance: the activation kernels read each element once and write its code once; the weights'
// kernel reads its block twice (amax, then codes), once per optimizer step.
#include "ops/cuda/fp8_quantize.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cfloat>

#include "ops/cuda/cuda_resources.h"
#include "ops/cuda/float_convert.cuh"

namespace quill::cuda::fp8q {
namespace {

constexpr int kTile = 128;

__device__ __forceinline__ float block_scale(float amax, bool finite) {
  if (!finite) return __int_as_float(0x7fc00000);  // NaN: every element of the block becomes NaN
  if (amax == 0.0f) return 1.0f;
  float s = __fdiv_rn(448.0f, amax);
  if (isinf(s)) s = FLT_MAX;
  return __uint_as_float(__float_as_uint(s) & 0xFF800000u);
}
__device__ __forceinline__ float inverse(float s) { return __fdiv_rn(1.0f, s); }

__device__ __forceinline__ uint32_t codes4(float a, float b, float c, float d) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return lo | (hi << 16);
}

__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The group of `v` among starts[0..count): the last g with starts[g] <= v (empty groups share their
// start with the next group, so the one found holds v).
__device__ __forceinline__ int group_of(const int32_t* starts, int count, int64_t v) {
  int lo = 0, hi = count - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (starts[mid] <= v) lo = mid; else hi = mid - 1;
  }
  return lo;
}

// One warp per (padded row, 128-column tile); each lane four consecutive columns.
template <typename T>
__global__ void quantize_rows_kernel(const T* __restrict__ x, int64_t C, int64_t Cb, RowGroups g,
                                     uint8_t* __restrict__ codes, float* __restrict__ scale_inv, int64_t items) {
  const int64_t item = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32;
  if (item >= items) return;  // whole warps leave together
  const int64_t d = item / Cb, j = item % Cb;
  const int grp = group_of(g.dst, g.count, d);
  const int64_t r = d - g.dst[grp];
  const bool real = r < g.src[grp + 1] - g.src[grp];
  const int64_t col = j * kTile + lane * 4;
  float v[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  if (real && col < C) {
    const T* row = x + (g.src[grp] + r) * C + col;
#pragma unroll
    for (int k = 0; k < 4; ++k) v[k] = to_f32(row[k]);
  }
  float amax = 0.0f;
  bool finite = true;
#pragma unroll
  for (int k = 0; k < 4; ++k) {
    finite = finite && isfinite(v[k]);
    amax = fmaxf(amax, fabsf(v[k]));
  }
  amax = warp_max(amax);
  finite = __all_sync(0xffffffffu, finite);
  const float s = block_scale(amax, finite);
  if (col < C) *reinterpret_cast<uint32_t*>(codes + d * C + col) = codes4(v[0] * s, v[1] * s, v[2] * s, v[3] * s);
  if (lane == 0) scale_inv[Cb * g.dst[grp] + j * (g.dst[grp + 1] - g.dst[grp]) + r] = inverse(s);
}

// One block of 256 threads per (32-column chunk, 128-row tile of a group): the tile through shared memory,
// one scale per column, the codes written transposed, 16 rows (16 bytes) per thread.
template <typename T>
__global__ void quantize_columns_kernel(const T* __restrict__ x, int64_t C, RowGroups g, uint8_t* __restrict__ codes_t,
                                        int64_t Np, float* __restrict__ scale_inv, int64_t ldc) {
  __shared__ float tile[kTile][33];
  __shared__ float col_scale[32];
  const int t = blockIdx.y;
  const int grp = group_of(g.tile, g.count, t);
  const int64_t r0 = static_cast<int64_t>(t - g.tile[grp]) * kTile;  // within the group's padded rows
  const int64_t real_rows = g.src[grp + 1] - g.src[grp];
  const int64_t tile_rows = min(static_cast<int64_t>(kTile), static_cast<int64_t>(g.dst[grp + 1] - g.dst[grp]) - r0);
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32;
  const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
  for (int i = ty; i < kTile; i += 8) {
    const int64_t r = r0 + i, c = c0 + tx;
    tile[i][tx] = (r < real_rows && c < C) ? to_f32(x[(g.src[grp] + r) * C + c]) : 0.0f;
  }
  __syncthreads();
  for (int k = 0; k < 4; ++k) {
    const int c = ty * 4 + k;
    float amax = 0.0f;
    bool finite = true;
    for (int i = tx; i < kTile; i += 32) {
      const float v = tile[i][c];
      finite = finite && isfinite(v);
      amax = fmaxf(amax, fabsf(v));
    }
    amax = warp_max(amax);
    finite = __all_sync(0xffffffffu, finite);
    if (tx == 0) {
      const float s = block_scale(amax, finite);
      col_scale[c] = s;
      if (c0 + c < C) scale_inv[static_cast<int64_t>(t) * ldc + c0 + c] = inverse(s);
    }
  }
  __syncthreads();
  const int c = threadIdx.x / 8, rb = (threadIdx.x % 8) * 16;
  if (c0 + c < C && rb < tile_rows) {
    const float s = col_scale[c];
    // Padding rows get code 0 even in a NaN tile (0 * NaN would give the NaN code).
    auto value = [&](int i) { return r0 + i < real_rows ? tile[i][c] * s : 0.0f; };
    uint32_t w[4];
#pragma unroll
    for (int q = 0; q < 4; ++q)
      w[q] = codes4(value(rb + 4 * q), value(rb + 4 * q + 1), value(rb + 4 * q + 2), value(rb + 4 * q + 3));
    *reinterpret_cast<uint4*>(codes_t + (c0 + c) * Np + g.dst[grp] + r0 + rb) = make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// One block of 256 threads' weight block: the scale from each thread's amax and finite flag (reduced over the
// block), its inverse written to both factor arrays by thread 0. Every thread calls it (it synchronises the block).
__device__ float weight_block_scale(float amax, bool finite, float* scale_inv, float* scale_inv_t) {
  __shared__ float warp_amax[8];
  __shared__ int warp_finite[8];
  amax = warp_max(amax);
  finite = __all_sync(0xffffffffu, finite);
  if (threadIdx.x % 32 == 0) {
    warp_amax[threadIdx.x / 32] = amax;
    warp_finite[threadIdx.x / 32] = finite;
  }
  __syncthreads();
  amax = 0.0f;
  finite = true;
  for (int k = 0; k < 8; ++k) {
    amax = fmaxf(amax, warp_amax[k]);
    finite = finite && warp_finite[k];
  }
  const float s = block_scale(amax, finite);
  if (threadIdx.x == 0) *scale_inv = *scale_inv_t = inverse(s);
  return s;
}

// One block of 256 threads per 128x128 block of one matrix: amax, then the codes (row-major through
// shared memory, then transposed out).
template <typename T>
__global__ void quantize_blocks_kernel(const T* __restrict__ w, int64_t M, int64_t K, uint8_t* __restrict__ codes,
                                       uint8_t* __restrict__ codes_t, float* __restrict__ scale_inv,
                                       float* __restrict__ scale_inv_t, int64_t ldk, int64_t ldm) {
  __shared__ uint8_t q[kTile][kTile + 1];
  const int64_t e = blockIdx.z, mb = blockIdx.y, kb = blockIdx.x;
  const int64_t Mb = (M + kTile - 1) / kTile, Kb = (K + kTile - 1) / kTile;
  const int64_t m0 = mb * kTile, k0 = kb * kTile;
  const int64_t rows = min(static_cast<int64_t>(kTile), M - m0), cols = min(static_cast<int64_t>(kTile), K - k0);
  const T* we = w + e * M * K;
  float amax = 0.0f;
  bool finite = true;
  for (int idx = threadIdx.x; idx < kTile * kTile; idx += blockDim.x) {
    const int i = idx / kTile, j = idx % kTile;
    if (i < rows && j < cols) {
      const float v = to_f32(we[(m0 + i) * K + k0 + j]);
      finite = finite && isfinite(v);
      amax = fmaxf(amax, fabsf(v));
    }
  }
  const float s = weight_block_scale(amax, finite, scale_inv + (e * Mb + mb) * ldk + kb,
                                     scale_inv_t + (e * Kb + kb) * ldm + mb);
  for (int idx = threadIdx.x; idx < kTile * kTile; idx += blockDim.x) {
    const int i = idx / kTile, j = idx % kTile;
    if (i < rows && j < cols) {
      const uint8_t code = __nv_cvt_float_to_fp8(to_f32(we[(m0 + i) * K + k0 + j]) * s, __NV_SATFINITE, __NV_E4M3);
      codes[e * M * K + (m0 + i) * K + k0 + j] = code;
      q[i][j] = code;
    }
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < kTile * kTile; idx += blockDim.x) {
    const int j = idx / kTile, i = idx % kTile;
    if (i < rows && j < cols) codes_t[e * K * M + (k0 + j) * M + m0 + i] = q[i][j];
  }
}

// The same blocks read once, 16 bytes per load, into registers: amax, then the codes from the registers (8 or 4
// bytes per store), and the transposed codes 16 bytes per store from shared memory. For matrices whose dimensions
// are multiples of 16 and whose pointers are 16-byte aligned (every FP8 matrix on the GPU: fp8_params.cc refuses
// others); the scalar kernel above takes the rest. The same values in the same arithmetic: the same bits.
// (The scalar kernel ran the slice's weights at ~730 GB/s, 16 ms per optimizer step on an H100: one 2-byte load
// and two 1-byte stores per thread and element, the block read twice.)
template <typename T>
__global__ void __launch_bounds__(256) quantize_blocks_vec_kernel(const T* __restrict__ w, int64_t M, int64_t K,
                                                                  uint8_t* __restrict__ codes,
                                                                  uint8_t* __restrict__ codes_t,
                                                                  float* __restrict__ scale_inv,
                                                                  float* __restrict__ scale_inv_t, int64_t ldk,
                                                                  int64_t ldm) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte load
  constexpr int kPerRow = kTile / kVec;                    // loads per block row
  constexpr int kLoads = kTile * kPerRow / 256;            // per thread: 8 (bf16) or 16 (fp32)
  __shared__ uint8_t q[kTile][kTile + 1];
  const int64_t e = blockIdx.z, mb = blockIdx.y, kb = blockIdx.x;
  const int64_t Mb = (M + kTile - 1) / kTile, Kb = (K + kTile - 1) / kTile;
  const int64_t m0 = mb * kTile, k0 = kb * kTile;
  const int rows = static_cast<int>(min(static_cast<int64_t>(kTile), M - m0));
  const int cols = static_cast<int>(min(static_cast<int64_t>(kTile), K - k0));
  const T* we = w + e * M * K;
  float v[kLoads][kVec];
  float amax = 0.0f;
  bool finite = true;
#pragma unroll
  for (int l = 0; l < kLoads; ++l) {
    const int idx = l * 256 + threadIdx.x, i = idx / kPerRow, j = (idx % kPerRow) * kVec;
    if (i < rows && j < cols) {  // (cols is a multiple of 16, so a load is whole or outside)
      const uint4 raw = *reinterpret_cast<const uint4*>(we + (m0 + i) * K + k0 + j);
      const T* t = reinterpret_cast<const T*>(&raw);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        v[l][k] = to_f32(t[k]);
        finite = finite && isfinite(v[l][k]);
        amax = fmaxf(amax, fabsf(v[l][k]));
      }
    }
  }
  const float s = weight_block_scale(amax, finite, scale_inv + (e * Mb + mb) * ldk + kb,
                                     scale_inv_t + (e * Kb + kb) * ldm + mb);
#pragma unroll
  for (int l = 0; l < kLoads; ++l) {
    const int idx = l * 256 + threadIdx.x, i = idx / kPerRow, j = (idx % kPerRow) * kVec;
    if (i < rows && j < cols) {
      uint32_t packed[kVec / 4];
#pragma unroll
      for (int k = 0; k < kVec; k += 4) {
        packed[k / 4] = codes4(v[l][k] * s, v[l][k + 1] * s, v[l][k + 2] * s, v[l][k + 3] * s);
#pragma unroll
        for (int b = 0; b < 4; ++b) q[i][j + k + b] = static_cast<uint8_t>(packed[k / 4] >> (8 * b));
      }
      uint8_t* out = codes + e * M * K + (m0 + i) * K + k0 + j;
      if constexpr (kVec == 8) *reinterpret_cast<uint2*>(out) = make_uint2(packed[0], packed[1]);
      else *reinterpret_cast<uint32_t*>(out) = packed[0];
    }
  }
  __syncthreads();
  // Transposed: per (column j, 16 rows from i0) one 16-byte store; rows is a multiple of 16.
  for (int idx = threadIdx.x; idx < kTile * (kTile / 16); idx += 256) {
    const int j = idx / (kTile / 16), i0 = (idx % (kTile / 16)) * 16;
    if (j >= cols || i0 >= rows) continue;
    uint32_t word[4];
#pragma unroll
    for (int b = 0; b < 4; ++b)
      word[b] = q[i0 + 4 * b][j] | (q[i0 + 4 * b + 1][j] << 8) | (q[i0 + 4 * b + 2][j] << 16) |
                (static_cast<uint32_t>(q[i0 + 4 * b + 3][j]) << 24);
    *reinterpret_cast<uint4*>(codes_t + e * K * M + (k0 + j) * M + m0 + i0) = make_uint4(word[0], word[1], word[2],
                                                                                            word[3]);
  }
}

template <typename O>
__global__ void dequantize_blocks_kernel(const uint8_t* __restrict__ codes, const float* __restrict__ scale_inv,
                                         int64_t ld, int64_t R, int64_t C, int64_t total, O* __restrict__ out) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total) return;
  const int64_t c = idx % C, r = (idx / C) % R, e = idx / (R * C);
  const int64_t Rb = (R + kTile - 1) / kTile;
  const __half_raw h = __nv_cvt_fp8_to_halfraw(codes[idx], __NV_E4M3);
  out[idx] = from_f32<O>(__half2float(__half(h)) * scale_inv[(e * Rb + r / kTile) * ld + c / kTile]);
}

// One block per source row.
template <typename P, typename O>
__global__ void unpad_rows_kernel(const P* __restrict__ pad, int64_t C, RowGroups g, O* __restrict__ out,
                                  bool accumulate) {
  const int64_t r = blockIdx.x;
  const int grp = group_of(g.src, g.count, r);
  const int64_t d = g.dst[grp] + (r - g.src[grp]);
  for (int64_t c = threadIdx.x; c < C; c += blockDim.x) {
    float v = to_f32(pad[d * C + c]);
    if (accumulate) v += to_f32(out[r * C + c]);
    out[r * C + c] = from_f32<O>(v);
  }
}

void require_float_dtype(const char* what, DType d) {
  QUILL_CHECK(d == DType::BF16 || d == DType::F32, "FP8 quantisation: {} has dtype {}, expected BF16 or F32", what,
              dtype_name(d));
}

RowGroups finish(const char* op, RowGroups g) {
  for (int i = 0; i < g.count; ++i) {
    const int64_t rows = g.src[i + 1] - g.src[i];
    const int64_t padded = (rows + kRowAlign - 1) / kRowAlign * kRowAlign;
    const int64_t dst = static_cast<int64_t>(g.dst[i]) + padded;
    QUILL_CHECK(dst < (int64_t{1} << 31), "{}: {} padded rows are beyond the FP8 kernels' 2^31", op, dst);
    g.dst[i + 1] = static_cast<int32_t>(dst);
    g.tile[i + 1] = g.tile[i] + static_cast<int32_t>((padded + kTile - 1) / kTile);
  }
  return g;
}

}  // namespace

RowGroups single_group(const char* op, int64_t rows) {
  QUILL_CHECK(rows >= 0 && rows < (int64_t{1} << 30), "{}: {} rows are beyond the FP8 kernels' 2^30", op, rows);
  RowGroups g;
  g.count = 1;
  g.src[1] = static_cast<int32_t>(rows);
  return finish(op, g);
}

RowGroups groups_of(const char* op, const int64_t* counts, int64_t E) {
  QUILL_CHECK(E >= 1 && E <= kMaxGroups, "{}: {} experts; the FP8 grouped GEMMs take 1 to {}", op, E, kMaxGroups);
  RowGroups g;
  g.count = static_cast<int>(E);
  int64_t rows = 0;
  for (int64_t e = 0; e < E; ++e) {
    rows += counts[e];
    QUILL_CHECK(rows < (int64_t{1} << 30), "{}: {} rows are beyond the FP8 kernels' 2^30", op, rows);
    g.src[e + 1] = static_cast<int32_t>(rows);
  }
  return finish(op, g);
}

void quantize_rows(const DeviceContext& ctx, const void* x, DType x_dtype, int64_t C, const RowGroups& g,
                   uint8_t* codes, float* scale_inv) {
  require_float_dtype("x", x_dtype);
  QUILL_CHECK(C % 4 == 0, "FP8 quantisation: {} columns, expected a multiple of 4", C);
  const int64_t Cb = (C + kTile - 1) / kTile, items = g.padded_total() * Cb;
  if (items == 0) return;
  const int threads = 256;
  const int64_t blocks = (items * 32 + threads - 1) / threads;
  if (x_dtype == DType::BF16)
    quantize_rows_kernel<<<blocks, threads, 0, stream_of(ctx)>>>(static_cast<const __nv_bfloat16*>(x), C, Cb, g, codes,
                                                                 scale_inv, items);
  else
    quantize_rows_kernel<<<blocks, threads, 0, stream_of(ctx)>>>(static_cast<const float*>(x), C, Cb, g, codes,
                                                                 scale_inv, items);
  QUILL_CUDA_CHECK_LAUNCH("quantize_rows_kernel");
}

void quantize_columns_transposed(const DeviceContext& ctx, const void* x, DType x_dtype, int64_t C, const RowGroups& g,
                                 uint8_t* codes_t, float* scale_inv) {
  require_float_dtype("x", x_dtype);
  QUILL_CHECK(C % 4 == 0, "FP8 quantisation: {} columns, expected a multiple of 4", C);
  const int64_t tiles = g.tile[g.count];
  if (tiles == 0 || C == 0) return;
  const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(tiles));
  const int64_t ldc = (C + 3) / 4 * 4;
  if (x_dtype == DType::BF16)
    quantize_columns_kernel<<<grid, 256, 0, stream_of(ctx)>>>(static_cast<const __nv_bfloat16*>(x), C, g, codes_t,
                                                              g.padded_total(), scale_inv, ldc);
  else
    quantize_columns_kernel<<<grid, 256, 0, stream_of(ctx)>>>(static_cast<const float*>(x), C, g, codes_t,
                                                              g.padded_total(), scale_inv, ldc);
  QUILL_CUDA_CHECK_LAUNCH("quantize_columns_kernel");
}

void quantize_blocks(const DeviceContext& ctx, const void* w, DType w_dtype, int64_t E, int64_t M, int64_t K,
                     uint8_t* codes, uint8_t* codes_t, float* scale_inv, float* scale_inv_t) {
  require_float_dtype("w", w_dtype);
  if (E == 0 || M == 0 || K == 0) return;
  const int64_t Mb = (M + kTile - 1) / kTile, Kb = (K + kTile - 1) / kTile;
  const int64_t ldk = (Kb + 3) / 4 * 4, ldm = (Mb + 3) / 4 * 4;
  const dim3 grid(static_cast<unsigned>(Kb), static_cast<unsigned>(Mb), static_cast<unsigned>(E));
  const bool vector_form = M % 16 == 0 && K % 16 == 0 &&
                           (reinterpret_cast<uintptr_t>(w) | reinterpret_cast<uintptr_t>(codes) |
                            reinterpret_cast<uintptr_t>(codes_t)) % 16 == 0;
  if (vector_form && w_dtype == DType::BF16)
    quantize_blocks_vec_kernel<<<grid, 256, 0, stream_of(ctx)>>>(static_cast<const __nv_bfloat16*>(w), M, K, codes,
                                                                 codes_t, scale_inv, scale_inv_t, ldk, ldm);
  else if (vector_form)
    quantize_blocks_vec_kernel<<<grid, 256, 0, stream_of(ctx)>>>(static_cast<const float*>(w), M, K, codes, codes_t,
                                                                 scale_inv, scale_inv_t, ldk, ldm);
  else if (w_dtype == DType::BF16)
    quantize_blocks_kernel<<<grid, 256, 0, stream_of(ctx)>>>(static_cast<const __nv_bfloat16*>(w), M, K, codes, codes_t,
                                                             scale_inv, scale_inv_t, ldk, ldm);
  else
    quantize_blocks_kernel<<<grid, 256, 0, stream_of(ctx)>>>(static_cast<const float*>(w), M, K, codes, codes_t,
                                                             scale_inv, scale_inv_t, ldk, ldm);
  QUILL_CUDA_CHECK_LAUNCH("quantize_blocks_kernel");
}

void dequantize_blocks(const DeviceContext& ctx, const uint8_t* codes, const float* scale_inv, int64_t scale_ld,
                       int64_t E, int64_t R, int64_t C, void* out, DType out_dtype) {
  require_float_dtype("out", out_dtype);
  const int64_t total = E * R * C;
  if (total == 0) return;
  const int threads = 256;
  const int64_t blocks = (total + threads - 1) / threads;
  if (out_dtype == DType::BF16)
    dequantize_blocks_kernel<<<blocks, threads, 0, stream_of(ctx)>>>(codes, scale_inv, scale_ld, R, C, total,
                                                                     static_cast<__nv_bfloat16*>(out));
  else
    dequantize_blocks_kernel<<<blocks, threads, 0, stream_of(ctx)>>>(codes, scale_inv, scale_ld, R, C, total,
                                                                     static_cast<float*>(out));
  QUILL_CUDA_CHECK_LAUNCH("dequantize_blocks_kernel");
}

void unpad_rows(const DeviceContext& ctx, const void* pad, DType pad_dtype, int64_t C, const RowGroups& g, void* out,
                DType out_dtype, bool accumulate) {
  require_float_dtype("the padded rows", pad_dtype);
  require_float_dtype("out", out_dtype);
  const int64_t rows = g.src[g.count];
  if (rows == 0 || C == 0) return;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>(rows);
  auto launch = [&](auto* p, auto* o) {
    unpad_rows_kernel<<<blocks, threads, 0, stream_of(ctx)>>>(p, C, g, o, accumulate);
  };
  using B = __nv_bfloat16;
  if (pad_dtype == DType::F32 && out_dtype == DType::F32) launch(static_cast<const float*>(pad), static_cast<float*>(out));
  else if (pad_dtype == DType::F32) launch(static_cast<const float*>(pad), static_cast<B*>(out));
  else if (out_dtype == DType::F32) launch(static_cast<const B*>(pad), static_cast<float*>(out));
  else launch(static_cast<const B*>(pad), static_cast<B*>(out));
  QUILL_CUDA_CHECK_LAUNCH("unpad_rows_kernel");
}

}  // namespace quill::cuda::fp8q
